"""``hipq run`` imports aiohttp with its two default client TLS contexts' CA
certificates loaded at their first handshake (hipq.cli.lean_tls): about 2 MB less
for a daemon that never makes a TLS call through them. A connection made through
them still verifies the server: trusted by the CA that ``SSL_CERT_FILE`` names, or
refused. Each case runs in a fresh interpreter (the deferral applies at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

FETCH = """
import asyncio, json, ssl, sys

from hipq.cli import lean_imports
lean_imports()
import aiohttp, aiohttp.connector, aiohttp.web

verified = aiohttp.connector._SSL_CONTEXT_VERIFIED
before = verified.cert_store_stats()["x509_ca"]
fresh = ssl.create_default_context().cert_store_stats()["x509_ca"]  # loads as usual
restored = "set_default_verify_paths" not in vars(ssl.SSLContext)


async def main(cert: str, key: str) -> str:
    app = aiohttp.web.Application()
    app.router.add_get("/", lambda request: aiohttp.web.Response(text="hello"))
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_side)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://localhost:{port}/") as answer:
                return await answer.text()
    except aiohttp.ClientConnectorCertificateError:
        return "refused"
    finally:
        await runner.cleanup()

answer = asyncio.run(main(sys.argv[1], sys.argv[2]))
print(json.dumps({"before": before, "fresh": fresh, "restored": restored, "answer": answer,
                  "after": verified.cert_store_stats()["x509_ca"]}))
"""


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    paths = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    other = trustme.CA()  # a CA that signed nothing here
    paths["other"] = folder / "other.pem"
    other.cert_pem.write_to_path(str(paths["other"]))
    return paths


def _fetch(tls: dict[str, Path], ca_file: Path) -> dict[str, object]:
    environ = {**os.environ, "SSL_CERT_FILE": str(ca_file)}
    out = subprocess.run([sys.executable, "-c", FETCH, str(tls["cert"]), str(tls["key"])],
                         capture_output=True, text=True, timeout=60, env=environ)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_certificates_load_at_the_first_handshake_and_verify(
        tls: dict[str, Path]) -> None:
    result = _fetch(tls, tls["ca"])
    assert result["before"] == 0  # not at import
    assert result["fresh"] == 1  # any other context loads them at once
    assert result["restored"] is True
    assert result["answer"] == "hello"  # verified by the CA SSL_CERT_FILE names
    assert result["after"] == 1


def test_a_server_no_trusted_ca_signed_is_refused(tls: dict[str, Path]) -> None:
    result = _fetch(tls, tls["other"])
    assert result["answer"] == "refused"
    assert result["after"] == 1
