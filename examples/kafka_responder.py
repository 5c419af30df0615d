"""A Kafka downstream for hipq in ten lines:
python examples/kafka_responder.py BOOTSTRAP REQUEST_TOPIC RESPONSE_TOPIC [GROUP]"""
import asyncio
import sys

from hipq.downstream import Fail, KafkaResponder, Launch


async def greet(launch: Launch) -> dict[str, str]:
    if "name" not in launch.data:
        raise Fail("whom should I greet?")  # the job fails and is not tried again
    return {"greeting": f"hello, {launch.data['name']}"}  # the job's result


bootstrap, requests, responses, *group = sys.argv[1:]
asyncio.run(KafkaResponder(bootstrap, requests, responses, greet, *group).run())
