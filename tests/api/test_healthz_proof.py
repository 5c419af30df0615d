"""``GET /healthz?nonce=N`` (docs/http-api.md, "/healthz"): the daemon proves it holds
this database's signing key by an HMAC of the asker's nonce and of the connection the
question came on; ``instance`` is the random id kept in the database."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hipq.responses.signing import INSTANCE_META, Signer, connection_name
from tests.api.conftest import SIGNING_KEY, Live, LiveFactory

NONCE = "5e" * 32


async def _healthz(lv: Live, query: str) -> tuple[int, Any, str]:
    """The answer, and the connection it came on as the asker names it (the
    daemon's end first)."""
    port = int(lv.api.base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        here = connection_name(writer.get_extra_info("peername"),
                               writer.get_extra_info("sockname"))
        writer.write(f"GET /healthz{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert here is not None
    return int(head.split()[1]), json.loads(body), here


async def test_healthz_proves_the_key_on_this_connection(live: LiveFactory) -> None:
    lv = await live()
    status, body, here = await _healthz(lv, f"?nonce={NONCE}")
    assert status == 200, body
    signer = Signer(SIGNING_KEY)
    assert signer.proves(body["proof"], NONCE, here)
    assert not signer.proves(body["proof"], "6f" * 32, here)
    assert not Signer(SIGNING_KEY + "-other").proves(body["proof"], NONCE, here)
    store = lv.daemon.store
    assert store is not None
    assert body["instance"] == await store.meta_get_or_set(INSTANCE_META, "unused")
    plain = await _healthz(lv, "")
    assert plain[0] == 200
    assert plain[1].get("proof") is None
    assert plain[1]["instance"] == body["instance"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("nonce", ["", "5e" * 8, "zz" * 32, "5E" * 32, "5e" * 65,
                                   "5e" * 32 + "\n", "1\ntoken\nkey"])
async def test_healthz_refuses_a_nonce_that_is_not_one(live: LiveFactory, nonce: str) -> None:
    lv = await live()
    async with lv.api.session.get(f"{lv.api.base}/healthz", params={"nonce": nonce}) as answer:
        body = await answer.json()
    assert answer.status == 422, body
    assert "proof" not in body
