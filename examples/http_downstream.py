"""An HTTP downstream for hipq in ten lines: python examples/http_downstream.py [PORT] [HIPQ_URL]"""
import sys

from aiohttp import web

from hipq.downstream import Fail, Launch, callback_app


async def greet(launch: Launch) -> dict[str, str]:
    if "name" not in launch.data:
        raise Fail("whom should I greet?")  # the job fails and is not tried again
    return {"greeting": f"hello, {launch.data['name']}"}  # the job's result


port = int(sys.argv[1]) if sys.argv[1:] else 9000
hipq = sys.argv[2] if sys.argv[2:] else "http://127.0.0.1:8080"  # callbacks go there only
web.run_app(callback_app(greet, hipq_urls=hipq), host="127.0.0.1", port=port)
