"""An HTTP downstream for hipq in ten lines: python examples/http_downstream.py [PORT]"""
import sys

from aiohttp import web

from hipq.downstream import Fail, Launch, callback_app


async def greet(launch: Launch) -> dict[str, str]:
    if "name" not in launch.data:
        raise Fail("whom should I greet?")  # the job fails and is not tried again
    return {"greeting": f"hello, {launch.data['name']}"}  # the job's result


web.run_app(callback_app(greet), host="127.0.0.1", port=int(sys.argv[1]) if sys.argv[1:] else 9000)
