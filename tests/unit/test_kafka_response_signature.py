"""The Kafka response signature (docs/kafka.md, "Signed responses"), without a broker:
the launch's ``Hipq-Signature`` names one try of one job, is never the callback URL's
``sig``, and a parser built with a signer turns a response without it into
:class:`ForgedResponse` and a signed one into a response bound to that try."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from hipq.config import KafkaConfig, KafkaResponseFields
from hipq.jobs import Job
from hipq.responses.kafka_consumer import (
    ForgedResponse,
    KafkaResponseConsumer,
    MalformedMessage,
    ResponseParser,
)
from hipq.responses.signing import Signer
from hipq.targets.http import HttpClient
from hipq.targets.kafka_target import KafkaTarget

SIGNER = Signer("k" * 40)


@dataclass
class _Record:
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    key: bytes | None = None
    topic: str = "resp"
    partition: int = 0
    offset: int = 7
    timestamp: int = 1700000000000


def test_a_signature_names_one_try_and_is_not_the_callback_signature() -> None:
    signed = SIGNER.response_signature("order-7", 2, "tok")
    attempt, token, mac = signed.split(".")
    assert (attempt, token, len(mac)) == ("2", "tok", 64)
    assert mac != SIGNER.sign("order-7", 2, "tok")
    assert mac not in SIGNER.callback_url("http://h:1", "order-7", 2, "tok")
    assert SIGNER.signed_try("order-7", signed) == (2, "tok")
    assert Signer("other" * 8).signed_try("order-7", signed) is None  # another database
    dotted = SIGNER.response_signature("k", 1, "a.b")
    assert SIGNER.signed_try("k", dotted) == (1, "a.b")
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    for bad in ("", ".", "..", "nonsense", signed + " ", " " + signed, signed.upper(),
                f"02.tok.{mac}", f"3.tok.{mac}", f"2.tok2.{mac}", f"2..{mac}",
                f"2.tok.{flipped}", f"2.tok.{mac}.x", f"\uff12.tok.{mac}", f"-2.tok.{mac}",
                f"{'9' * 5000}.tok.{mac}", f"2.tok.{mac[:32]}", SIGNER.sign("order-7", 2, "tok"),
                f"2.tok.{SIGNER.sign('order-7', 2, 'tok')}"):
        assert SIGNER.signed_try("order-7", bad) is None, bad
    assert SIGNER.signed_try("order-8", signed) is None  # another key


def _parser() -> ResponseParser:
    return ResponseParser(KafkaResponseFields(), signer=SIGNER)


def _response(headers: dict[str, str], **value: Any) -> _Record:
    return _Record(json.dumps({"status": "succeeded", **value}).encode(),
                   [(k, v.encode()) for k, v in headers.items()])


def test_a_parser_with_a_signer_binds_a_signed_response_to_its_try() -> None:
    signed = SIGNER.response_signature("order-7", 2, "tok")
    key = {"Hipq-Correlation-Key": "order-7"}
    response = _parser().parse(_response({**key, "Hipq-Signature": signed}, result=1))
    assert (response.correlation_key, response.attempt, response.token, response.result) == (
        "order-7", 2, "tok", 1)
    assert _parser().parse(_response({**key, "Hipq-Signature": signed}, attempt=2)).token \
        == "tok"
    for headers, value in (
            (key, {}),                                                  # unsigned
            ({**key, "Hipq-Signature": "2.tok." + "0" * 64}, {}),       # made up
            ({**key, "Hipq-Signature": signed}, {"attempt": 1}),        # another attempt
            ({**key, "Hipq-Signature": signed, "Hipq-Attempt": "3"}, {}),
            ({"Hipq-Correlation-Key": "order-8", "Hipq-Signature": signed}, {})):
        with pytest.raises(ForgedResponse):
            _parser().parse(_response(headers, **value))
    with pytest.raises(MalformedMessage) as caught:  # malformed first: not counted forged
        _parser().parse(_Record(b"[1]", [("Hipq-Signature", signed.encode())]))
    assert not isinstance(caught.value, ForgedResponse)
    # without a signer the header is not read, as before
    plain = ResponseParser(KafkaResponseFields()).parse(_response(key))
    assert (plain.attempt, plain.token) == (None, None)


def test_the_consumer_needs_a_signer_to_require_signatures() -> None:
    config = KafkaConfig(bootstrap_servers="127.0.0.1:1", require_signed_responses=True)
    with pytest.raises(ValueError, match="require_signed_responses"):
        KafkaResponseConsumer(config, store=None)  # type: ignore[arg-type]
    on = KafkaResponseConsumer(config, store=None, signer=SIGNER)  # type: ignore[arg-type]
    assert on.parser.signer is SIGNER
    off = KafkaResponseConsumer(KafkaConfig(bootstrap_servers="127.0.0.1:1"), store=None,  # type: ignore[arg-type]
                                signer=SIGNER)
    assert off.parser.signer is None
    assert KafkaConfig(bootstrap_servers="x").require_signed_responses is False


class _Sent:
    def __init__(self) -> None:
        self.headers: list[tuple[str, bytes]] = []

    async def dispatch(self, topic: str, *, key: bytes, value: bytes,
                       headers: list[tuple[str, bytes]]) -> Any:
        self.headers = headers
        return _done()


async def _done() -> None:
    return None


async def test_every_kafka_launch_carries_its_tries_signature() -> None:
    from hipq.config import KafkaTarget as KafkaTargetConfig

    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job(id="j1", queue="q", data={}, attempt=2, max_attempts=3, token="tok",
              correlation_key="order-7", run_at=now, created_at=now, updated_at=now)
    sent = _Sent()
    target = KafkaTarget(KafkaTargetConfig(kind="kafka", topic="req"), sent,  # type: ignore[arg-type]
                         HttpClient(signer=SIGNER))
    await (await target.dispatch(job))
    assert dict(sent.headers)["Hipq-Signature"] == SIGNER.response_signature(
        "order-7", 2, "tok").encode()
    unsigned = KafkaTarget(KafkaTargetConfig(kind="kafka", topic="req"), sent)  # type: ignore[arg-type]
    await (await unsigned.dispatch(job))
    assert "Hipq-Signature" not in dict(sent.headers)
