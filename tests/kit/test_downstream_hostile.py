"""hipq.downstream against hostile input (docs/security.md, "The integration kit": the helpers are
safe to expose).

callback_app: a launch whose callback URL is off the hipq origins it was given gets
403 and nothing is posted there (other hosts and ports, a longer port, userinfo,
dot segments, a path outside the base); redirects are not followed; a delivery
hipq never takes stops at ``callback_deadline_seconds``; launches past
``max_pending`` get 503 with Retry-After; ``auth=`` refuses a launch without
hipq's credentials (401). KafkaResponder: records it cannot read (a key that is
not UTF-8, a null value, nesting too deep, not JSON, a key that cannot be encoded)
are skipped, the good launch after them is answered and the offsets are committed.
Neither a Launch's repr nor any log line shows a callback signature or a token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from hipq.downstream import KafkaResponder, Launch, callback_app
from hipq.downstream._launch import encode_outcome
from hipq.downstream.callback import WORKER
from hipq.targets.http import auth_header
from hipq.testing import FakeClock
from tests.kafka.conftest import SESSION, create_topics, name
from tests.kit.test_client import Serve

SIG, TOKEN = "5ec4e7519a70e", "70ce4d9b1e5"  # what no repr and no log line may show
QUERY = f"attempt=1&t={TOKEN}&sig={SIG}"


class Recorder:
    """A small server that records each POST (path and query, body) and answers
    with the next status of ``script`` (then 202); ``headers`` go with 3xx."""

    def __init__(self, script: list[int] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.script = list(script or [])
        self.headers = headers or {}
        self.posts: list[tuple[str, Any]] = []
        self.arrived = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.post)
        return app

    async def post(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.posts.append((request.path_qs, body))
        self.arrived.set()
        if body == {"status": "running"}:  # a heartbeat: the script is for outcomes
            return web.json_response({}, status=202)
        status = self.script.pop(0) if self.script else 202
        return web.json_response({}, status=status,
                                 headers=self.headers if 300 <= status < 400 else None)


def launch_body(callback_url: str, job_id: str = "j1") -> dict[str, Any]:
    return {"id": job_id, "queue": "q", "data": {"n": 1}, "attempt": 1, "max_attempts": 3,
            "correlation_key": f"k-{job_id}", "callback_url": callback_url}


async def post(url: str, body: Any,
               headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(
            f"{url}/launch/q/j", json=body, headers=headers) as answer:
        return answer.status, await answer.json(), dict(answer.headers)


async def until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    """Wait (polling: the worker's tasks give no event) until ``predicate`` holds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        if predicate():
            return
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def succeed(launch: Launch) -> dict[str, int]:
    return {"n": launch.data["n"]}


# -- origins -------------------------------------------------------------------------------


async def test_a_callback_off_the_hipq_origins_gets_403_and_nothing_is_posted(
        serve: Serve) -> None:
    hipq, admin = Recorder(), Recorder()
    hipq_url, admin_url = await serve(hipq.app()), await serve(admin.app())
    handled: list[str] = []

    async def handle(launch: Launch) -> int:
        handled.append(launch.id)
        return 1

    down = await serve(callback_app(handle, hipq_urls=[f"{hipq_url}/hipq"]))
    port, admin_port = hipq_url.rsplit(":", 1)[1], admin_url.rsplit(":", 1)[1]
    hostile = [
        f"{admin_url}/admin/reset",                              # another port
        f"{hipq_url}/admin/reset",                               # outside the base path
        f"{hipq_url}/hipqx/v1/responses/k",                      # a longer first segment
        f"{hipq_url}/hipq",                                      # the base itself
        f"{hipq_url}/hipq/../admin/reset",                       # dot segments
        f"{hipq_url}/hipq/%2e%2e/admin/reset",
        f"{hipq_url}{admin_port}/hipq/v1/responses/k",           # a longer port
        f"{hipq_url}@127.0.0.1:{admin_port}/hipq/v1/responses/k",  # userinfo
        f"http://u:p@127.0.0.1:{port}/hipq/v1/responses/k",
        f"https://127.0.0.1:{port}/hipq/v1/responses/k",         # another scheme
        f"http://localhost:{port}/hipq/v1/responses/k",          # another host name
        f"ftp://127.0.0.1:{port}/hipq/v1/responses/k",
        "/hipq/v1/responses/k", "http://", "not a url", "http://[::1/x",
    ]
    for url in hostile:
        status, body, _ = await post(down, launch_body(url))
        assert (status, body["error"]["code"]) == (403, "callback_not_allowed"), url
    status, _, _ = await post(down, launch_body(f"{hipq_url}/hipq/v1/responses/k?{QUERY}"))
    assert status == 202
    await asyncio.wait_for(hipq.arrived.wait(), 10)
    assert hipq.posts == [(f"/hipq/v1/responses/k?{QUERY}",
                           {"status": "succeeded", "attempt": 1, "result": 1})]
    assert admin.posts == []
    assert handled == ["j1"]


async def test_hipq_urls_are_required_and_checked() -> None:
    with pytest.raises(TypeError):
        callback_app(succeed)  # type: ignore[call-arg]
    for bad in ([], "", "ftp://h", "http://", "http://u:p@h:1", "http://h:1/?q=1",
                "http://h:1/#f", "h:8080", ["http://h:1", 8080]):
        with pytest.raises(ValueError, match="hipq_urls"):
            callback_app(succeed, hipq_urls=bad)  # type: ignore[arg-type]
    for good in ("http://127.0.0.1:8080", ["http://a:1/", "https://b/base/"]):
        assert isinstance(callback_app(succeed, hipq_urls=good), web.Application)


def test_the_origin_check_compares_scheme_host_port_and_path() -> None:
    origins = callback_app(succeed, hipq_urls=["http://127.0.0.1:808",
                                               "https://GW.example/hipq/"])[WORKER].origins
    for url in ("http://127.0.0.1:808/v1/responses/k?attempt=1&sig=x",
                "http://127.0.0.1:0808/v1/responses/k?sig=x",
                "https://gw.example/hipq/v1/responses/k?sig=x",
                "https://gw.example:443/hipq/v1/responses/k?sig=x",
                "https://GW.EXAMPLE/hipq/v1/responses/k?sig=x"):
        assert origins.target(url) is not None, url
    for url in ("http://127.0.0.1:8080/v1/responses/k", "http://127.0.0.1/v1/responses/k",
                "http://127.0.0.1:808@gw.example/hipq/v1/x", "https://gw.example/hipqx/v1",
                "https://gw.example/hipq", "https://gw.example/hipq/../v1",
                "http://gw.example/hipq/v1/x", "https://gw.example:8443/hipq/v1/x",
                "https://gw.example.evil/hipq/v1/x", "https://evil/https://gw.example/hipq/v1",
                "https://gw.example\\@evil/hipq/v1/x", "https://gw.example%2f@evil/hipq/v1"):
        assert origins.target(url) is None, url


async def test_redirects_are_not_followed_and_the_outcome_is_sent_again(serve: Serve) -> None:
    admin = Recorder()
    admin_url = await serve(admin.app())
    hipq = Recorder([307, 308, 301], headers={"Location": f"{admin_url}/admin/reset"})
    hipq_url = await serve(hipq.app())
    down = await serve(callback_app(succeed, hipq_urls=hipq_url, clock=FakeClock()))
    status, _, _ = await post(down, launch_body(f"{hipq_url}/v1/responses/k?{QUERY}"))
    assert status == 202
    await until(lambda: len(hipq.posts) == 4)  # three redirects, then 202: stored
    assert admin.posts == []
    await asyncio.sleep(0.1)  # nothing more is sent once hipq took it
    assert len(hipq.posts) == 4


# -- bounds --------------------------------------------------------------------------------


async def test_a_delivery_stops_at_its_deadline(serve: Serve,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hipq.downstream")
    hipq = Recorder([503] * 1000)
    hipq_url = await serve(hipq.app())
    clock = FakeClock()
    app = callback_app(succeed, hipq_urls=hipq_url, clock=clock, callback_deadline_seconds=30)
    down = await serve(app)
    started = clock.monotonic()
    status, _, _ = await post(down, launch_body(f"{hipq_url}/v1/responses/k?{QUERY}"))
    assert status == 202
    await until(lambda: hipq.posts != [] and app[WORKER].pending == 0)
    assert 30 <= clock.monotonic() - started <= 36  # 0.1 s doubling to 5 s, then given up
    assert 6 < len(hipq.posts) < 20
    given_up = [r for r in caplog.records if "gave up" in r.getMessage()]
    assert len(given_up) == 1, caplog.text
    assert given_up[0].levelno == logging.ERROR


async def test_launches_past_max_pending_get_503_with_retry_after(serve: Serve) -> None:
    hipq = Recorder()
    hipq_url = await serve(hipq.app())
    release = asyncio.Event()
    running: list[str] = []

    async def handle(launch: Launch) -> int:
        running.append(launch.id)
        await release.wait()
        return 1

    app = callback_app(handle, hipq_urls=hipq_url, concurrency=1, max_pending=3)
    down = await serve(app)
    callback = f"{hipq_url}/v1/responses/k?{QUERY}"
    for n in range(3):
        assert (await post(down, launch_body(callback, f"j{n}")))[0] == 202
    status, body, headers = await post(down, launch_body(callback, "j3"))
    assert (status, body["error"]["code"]) == (503, "busy")
    assert int(headers["Retry-After"]) >= 1
    assert app[WORKER].pending == 3
    release.set()
    await until(lambda: app[WORKER].pending == 0)
    assert running == ["j0", "j1", "j2"]
    assert len(hipq.posts) == 3
    assert (await post(down, launch_body(callback, "j3")))[0] == 202
    assert callback_app(succeed, hipq_urls=hipq_url, concurrency=7)[WORKER].max_pending == 700


# -- credentials ---------------------------------------------------------------------------


async def test_auth_refuses_a_launch_without_hipqs_credentials(serve: Serve) -> None:
    hipq = Recorder()
    hipq_url = await serve(hipq.app())
    callback = f"{hipq_url}/v1/responses/k?{QUERY}"
    bearer = {"type": "bearer", "token": "s3cret-token"}
    down = await serve(callback_app(succeed, hipq_urls=hipq_url, auth=bearer))
    for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"},
                    {"Authorization": "Bearer s3cret-token2"}, {"Authorization": "Bearer "}):
        status, body, _ = await post(down, launch_body(callback), headers)
        assert (status, body["error"]["code"]) == (401, "unauthorized"), headers
    assert (await post(down, launch_body(callback), auth_header(bearer)))[0] == 202

    basic = {"type": "basic", "username": "hipq", "password": "pa:ss"}
    down = await serve(callback_app(succeed, hipq_urls=hipq_url, auth=basic))
    for pair, status in ((b"hipq:wrong", 401), (b"hipq:pa:sss", 401), (b"hipq:pa:ss", 202)):
        given = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        assert (await post(down, launch_body(callback), given))[0] == status, pair
    assert (await post(down, launch_body(callback), auth_header(basic)))[0] == 202
    await until(lambda: len(hipq.posts) == 3)
    for bad in ({"type": "bearer"}, {"type": "digest", "token": "x"}, {"token": ""},
                {"type": "bearer", "token": "a\nb"}, {"type": "basic", "password": "x"}):
        with pytest.raises(ValueError, match="auth"):
            callback_app(succeed, hipq_urls=hipq_url, auth=bad)


# -- no signature, no token ----------------------------------------------------------------


def test_a_launchs_repr_shows_no_signature() -> None:
    launch = Launch.from_json(launch_body(f"http://127.0.0.1:8080/v1/responses/k?{QUERY}"))
    for text in (repr(launch), str(launch)):
        assert SIG not in text, text
        assert TOKEN not in text, text
        assert "id='j1'" in text
        assert "callback_url='http://127.0.0.1:8080/v1/responses/k?...'" in text
    assert "callback_url=None" in repr(Launch.from_json(launch_body("")))
    app = callback_app(succeed, hipq_urls="http://h:1", auth={"token": TOKEN})
    responder = KafkaResponder("k:9092", "req", "resp", succeed,
                               consumer_options={"sasl_plain_password": TOKEN})
    for helper in (app[WORKER], responder):
        assert TOKEN not in repr(helper)


async def test_no_log_line_shows_a_signature_or_a_token(
        serve: Serve, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every delivery failure the helpers log: a connection timeout (aiohttp puts the
    whole URL in its message), a refusal, a redirect, the deadline, a failed heartbeat,
    and a launch with the wrong credentials."""
    caplog.set_level(logging.DEBUG)
    hipq = Recorder([302, 401], headers={"Location": f"/v1/responses/k?{QUERY}"})
    hipq_url = await serve(hipq.app())

    async def slow(launch: Launch) -> int:
        await asyncio.sleep(0.2)  # real time: a few heartbeats go out meanwhile
        return 1

    token = {"type": "bearer", "token": TOKEN}
    app = callback_app(slow, hipq_urls=hipq_url, heartbeat_seconds=0.02, auth=token,
                       callback_deadline_seconds=0.3)
    down = await serve(app)
    callback = f"{hipq_url}/v1/responses/k?{QUERY}"
    assert (await post(down, launch_body(callback), {"Authorization": f"Bearer {SIG}"}))[0] \
        == 401
    assert (await post(down, launch_body(callback), auth_header(token)))[0] == 202
    await until(lambda: len(hipq.posts) >= 3 and app[WORKER].pending == 0)  # 302, then 401

    pool = app[WORKER]._pool
    assert pool is not None

    async def timed_out(*args: Any, **kwargs: Any) -> Any:
        raise TimeoutError

    monkeypatch.setattr(pool, "_connect", timed_out)
    monkeypatch.setattr(pool, "_reuse", lambda origin: None)  # every request connects
    assert (await post(down, launch_body(callback, "j2"), auth_header(token)))[0] == 202
    await until(lambda: app[WORKER].pending == 0)
    logged = caplog.text + "".join(json.dumps(r.args, default=str) for r in caplog.records)
    for seen in ("TimeoutError", "gave up", "heartbeat", "302", "401"):
        assert seen in logged, logged
    assert SIG not in logged, logged
    assert TOKEN not in logged, logged


def test_an_outcome_that_cannot_be_encoded_fails_the_try() -> None:
    """Not an exception in the delivery task (HTTP) or a batch read again for ever
    (Kafka): the try fails, not retryable."""
    cycle: list[Any] = []
    cycle.append(cycle)
    for result in ("\ud800", cycle):
        body = json.loads(encode_outcome({"status": "succeeded", "attempt": 2, "result": result}))
        assert (body["status"], body["attempt"], body["retryable"]) == ("failed", 2, False)
        assert body["error"]["type"] == "unencodable_result"
    assert json.loads(encode_outcome({"status": "succeeded", "result": "é"}))["result"] == "é"


# -- Kafka ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_kafka_responder_skips_records_it_cannot_read(
        kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hipq.downstream")
    requests, responses = name("kit-req"), name("kit-resp")
    await create_topics(kafka_bootstrap, requests, responses, partitions=1)
    group = name("kit-responder")
    good = json.dumps(launch_body(f"http://h/v1/responses/k?{QUERY}", "good")).encode()
    unencodable = json.dumps(launch_body("", "surrogate") | {"correlation_key": "\ud800"})
    bad: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        (b"\xff\xfe", good, []),                                 # a key that is not UTF-8
        (b"k", good, [("Hipq-Correlation-Key", b"\xc3\x28")]),    # a header that is not
        (b"null", None, []),                                     # a null value
        (b"deep", b"[" * 100_000, []),                           # nesting too deep
        (b"bytes", b"\xff\xfe\xfd not json", []),
        (None, unencodable.encode(), []),                        # a key that cannot be sent
    ]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for key, value, headers in bad:
            await producer.send_and_wait(requests, value, key=key, headers=headers)
        await producer.send_and_wait(requests, good, headers=[("Hipq-Correlation-Key",
                                                               b"good-key")])
    finally:
        await producer.stop()

    handled: list[str] = []

    async def handle(launch: Launch) -> str:
        handled.append(launch.id)
        return "ok"

    responder = KafkaResponder(kafka_bootstrap, requests, responses, handle, group_id=group,
                               consumer_options=SESSION)
    running = asyncio.create_task(responder.run())
    try:
        answers = await _answers(kafka_bootstrap, responses, 1, within=30)
        assert not running.done()
    finally:
        responder.stop()
        await asyncio.wait_for(running, 30)
    assert [(k, json.loads(v)["result"]) for k, v in answers] == [(b"good-key", "ok")]
    assert handled == ["good"]
    assert responder.handled == 1
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == len(bad), caplog.text
    assert all(requests in line and "[0]@" in line for line in skipped), skipped
    for secret in ("[[[", SIG, TOKEN):  # neither values nor what they hold
        assert secret not in caplog.text
    assert await _committed(kafka_bootstrap, group, requests) == len(bad) + 1


async def _answers(bootstrap: str, topic: str, count: int,
                   within: float) -> list[tuple[bytes | None, bytes]]:
    """The first ``count`` responses on ``topic``: (correlation header, value)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=name("kit-reader"),
                                auto_offset_reset="earliest", **SESSION)
    await consumer.start()
    found: list[tuple[bytes | None, bytes]] = []
    try:
        async with asyncio.timeout(within):
            while len(found) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found += [(dict(r.headers).get("Hipq-Correlation-Key"), r.value)
                              for r in records]
    finally:
        await consumer.stop()
    return found


async def _committed(bootstrap: str, group: str, topic: str) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, **SESSION)
    await consumer.start()
    try:
        committed: int | None = await consumer.committed(TopicPartition(topic, 0))
        return committed
    finally:
        await consumer.stop()
