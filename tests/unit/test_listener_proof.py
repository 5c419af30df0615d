"""What a daemon proves to the CLI and what ``/healthz`` publishes (docs/http-api.md,
"/healthz"): the proof is an HMAC of the CLI's nonce and the connection, under a
key of its own derived from the signing key, so it serves as nothing else; the
``instance`` is a random id kept in the database, never derived from a secret; the
CLI sends the least-privileged token that serves."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path

from hipq.cli.remote import api_token
from hipq.config import Settings
from hipq.responses.signing import INSTANCE_META, Signer, connection_name, load_signer
from hipq.store import open_store
from hipq.testing import migrate_database

KEY = "listener-proof-key-0123456789abcdef"
NONCE = "a1" * 32
HERE = connection_name(("127.0.0.1", 8080), ("127.0.0.1", 50123))


def test_the_proof_holds_for_this_nonce_connection_and_key_only() -> None:
    assert HERE is not None
    signer = Signer(KEY)
    proof = signer.prove(NONCE, HERE)
    assert signer.proves(proof, NONCE, HERE)
    assert not signer.proves(proof, "b2" * 32, HERE)
    elsewhere = connection_name(("10.0.0.2", 8080), ("10.0.0.1", 50123))
    assert elsewhere is not None
    assert not signer.proves(proof, NONCE, elsewhere)
    other_port = connection_name(("127.0.0.1", 8080), ("127.0.0.1", 50124))
    assert other_port is not None
    assert not signer.proves(proof, NONCE, other_port)
    assert not Signer(KEY + "x").proves(proof, NONCE, HERE)
    assert not signer.proves(None, NONCE, HERE)
    assert not signer.proves(proof.upper() + "\u00e9", NONCE, HERE)


def test_a_proof_is_no_callback_signature_nor_an_hmac_of_the_signing_key() -> None:
    """The proof is made with a key derived from the signing key for this use
    alone: whatever nonce and connection an asker picks, the answer never signs a
    callback URL (``attempt\\ntoken\\nkey`` under the signing key)."""
    signer = Signer(KEY)
    proof = signer.prove("1", "token\ncorrelation-key")  # the text a signature covers
    assert proof != signer.sign("correlation-key", 1, "token")
    assert not signer.verify("correlation-key", 1, "token", proof)
    plain = hmac.new(KEY.encode(), b"1\ntoken\ncorrelation-key",
                     hashlib.sha256).hexdigest()
    assert proof != plain
    assert proof not in signer.response_signature("correlation-key", 1, "token")
    kafka = signer.prove("hipq/kafka-response/v1", "1\ntoken\ncorrelation-key")
    assert signer.signed_try("correlation-key", f"1.token.{kafka}") is None


def test_connection_names_are_canonical() -> None:
    mapped = connection_name(("::ffff:127.0.0.1", 8080, 0, 0), ("::ffff:127.0.0.1", 1, 0, 0))
    assert mapped == connection_name(("127.0.0.1", 8080), ("127.0.0.1", 1))
    six = connection_name(("::1", 8080, 0, 0), ("0:0::1", 1, 0, 0))
    assert six is not None
    assert "[::1]:8080" in six
    assert connection_name(None, ("127.0.0.1", 1)) is None
    assert connection_name("/run/hipq.sock", ("127.0.0.1", 1)) is None
    assert connection_name(("localhost", 8080), ("127.0.0.1", 1)) is None


def test_the_instance_is_not_derived_from_the_key() -> None:
    old = hmac.new(KEY.encode(), b"hipq instance", hashlib.sha256).hexdigest()[:16]
    one, two = Signer(KEY), Signer(KEY)
    assert old not in {one.instance(), two.instance()}
    assert one.instance() != two.instance()  # random, unless read from the database
    assert Signer(KEY, instance="0123abcd0123abcd").instance() == "0123abcd0123abcd"


async def test_the_instance_is_a_random_id_kept_in_the_database(
        db_url: str, tmp_path: Path) -> None:
    """Two daemons starting together on one database agree (the first writer wins);
    another database with the same configured key has another instance."""
    stores = [await open_store(db_url), await open_store(db_url)]
    try:
        signers = await asyncio.gather(*(load_signer(s, KEY) for s in stores))
        instance = signers[0].instance()
        assert signers[1].instance() == instance
        assert await stores[0].meta_get_or_set(INSTANCE_META, "other") == instance
        assert (await load_signer(stores[1], None)).instance() == instance
    finally:
        for store in stores:
            await store.close()
    other_url = f"sqlite+aiosqlite:///{tmp_path}/other.db"
    await migrate_database(other_url)
    other = await open_store(other_url)
    try:
        assert (await load_signer(other, KEY)).instance() != instance
    finally:
        await other.close()


def _settings(*tokens: tuple[str, str]) -> Settings:
    return Settings.model_validate({"api": {"tokens": [
        {"token": token, "role": role} for token, role in tokens]}})


def test_the_cli_sends_the_least_privileged_token_that_serves() -> None:
    admin, producer, reader = "a" * 20, "p" * 20, "r" * 20
    both = _settings((reader, "reader"), (admin, "admin"), (producer, "producer"))
    assert api_token(both, env={}) == producer
    assert api_token(both, env={"HIPQ_TOKEN": "mine"}) == "mine"
    assert api_token(_settings((reader, "reader"), (admin, "admin")), env={}) == admin
    assert api_token(_settings((reader, "reader")), env={}) is None
