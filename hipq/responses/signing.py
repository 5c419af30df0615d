"""Signed callback URLs.

A launched try gets ``{public_url}/v1/responses/{correlation_key}?attempt=N&t=T&sig=S``
where ``T`` is the job's token (random, made at enqueue, never reused) and ``S`` is
HMAC-SHA256 (hex) over the key, the attempt and the token. The downstream needs no
API token: the signature is its proof that hipq issued this URL for this try of
this job. Changing any part breaks the signature; checks are constant-time. The
token travels with the response into the inbox, and the reconcile loop applies it
to that job's try only, so a URL keeps no power over a later job that reuses the
key (a template key, in any queue), the id, or both.

The signing key comes from ``signing_key`` in the config, or is generated once and
stored in the database (``hipq_meta``), so every daemon of a cluster and every
restart signs and checks with the same key.

The same key lets a daemon prove to ``hipq enqueue`` that it is this database's
(docs/http-api.md, "/healthz"): the CLI picks a random nonce, the daemon answers
:meth:`Signer.prove` of it and of the TCP connection the question came on, and the
CLI checks the answer with the key it reads from the database before it sends a
token. The proof is an HMAC under a key of its own, derived from the signing key
for this use alone, so no answer is ever a callback signature (nor the reverse),
and a proof relayed from a daemon at another address names another connection.
``/healthz``'s ``instance`` is a random id kept in ``hipq_meta`` beside the key,
never derived from it (the key cannot be guessed from what ``/healthz`` shows).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus

if TYPE_CHECKING:  # the kit (hipq.client, hipq.downstream) loads no store
    from hipq.store import Store

SIGNING_KEY_META = "signing_key"
INSTANCE_META = "instance_id"  # /healthz's instance: random, made on first use
# the whole message that derives the proof's own key from the signing key: no other
# MAC under the signing key covers it (a callback's sig covers "<attempt>\n<token>\n
# <key>", and no attempt is written "hipq/..."; a Kafka response's RESPONSE_LABEL and
# more), and the proof's key is never shown, only MACs under it
PROOF_LABEL = b"hipq/listener-proof/v1"
NONCE_PATTERN = r"^[0-9a-f]{32,128}$"  # 16 to 64 random bytes, lowercase hex
# what quote(text, safe="") and quote_plus(text) leave as it is; and the same with
# colons, which quote(text, safe="") writes %3A (template keys: "{data.id}:{data.v}")
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*").fullmatch
_PLAIN_OR_COLON = re.compile(r"[A-Za-z0-9_.~:-]*").fullmatch


_BLOCK = 64  # SHA-256's block size (RFC 2104's B)
# what a Kafka response signature covers first (docs/kafka.md, "Signed responses"): a
# callback URL's signature covers "<attempt>\n<token>\n<key>", and no attempt is
# written "hipq/...", so neither signature is ever the other
RESPONSE_LABEL = b"hipq/kafka-response/v1\n"
MAX_ATTEMPT_DIGITS = 10  # an attempt is at most 2^31-1


class Signer:
    """Signs and checks callback URLs and proves the key to the CLI, for the database
    named ``instance`` (a random id when none is given: a test's, or a process's)."""

    def __init__(self, key: str, *, instance: str | None = None) -> None:
        if not key:
            raise ValueError("the signing key must not be empty")
        self._key = key.encode()
        self._instance = instance or secrets.token_hex(8)
        self._proof_key = hmac.digest(self._key, PROOF_LABEL, "sha256")
        # HMAC-SHA256 (RFC 2104) with the key's inner and outer pads hashed once: each
        # signature copies the two states (0.65 µs against 2.2 for ``hmac.digest``,
        # which sets the key up again every call; every try signs twice, issue 28)
        block = (hashlib.sha256(self._key).digest() if len(self._key) > _BLOCK
                 else self._key).ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def instance(self) -> str:
        """Names the database this key belongs to (a random id kept in it, telling
        nothing of the key): ``/healthz`` shows it, so a CLI can tell a daemon of
        another database apart. Anyone can read it: it proves nothing."""
        return self._instance

    def prove(self, nonce: str, connection: str) -> str:
        """The proof that the holder of this key answers ``nonce`` on ``connection``
        (:func:`connection_name`): HMAC-SHA256 (hex) under the proof's own key."""
        message = f"{nonce}\n{connection}".encode()
        return hmac.digest(self._proof_key, message, "sha256").hex()

    def proves(self, proof: object, nonce: str, connection: str) -> bool:
        """``proof`` is this key's answer to ``nonce`` on ``connection`` (in
        constant time; anything that is not a string is no proof)."""
        if not isinstance(proof, str):
            return False
        expected = self.prove(nonce, connection).encode()
        return hmac.compare_digest(expected, proof.encode("utf-8", "replace"))

    def sign(self, correlation_key: str, attempt: int, token: str) -> str:
        inner = self._inner.copy()
        inner.update(f"{attempt}\n{token}\n{correlation_key}".encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()  # hmac.digest(key, message, "sha256").hex()

    def verify(self, correlation_key: str, attempt: int, token: str, signature: str) -> bool:
        expected = self.sign(correlation_key, attempt, token)
        return hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace"))

    def response_signature(self, correlation_key: str, attempt: int, token: str) -> str:
        """The ``Hipq-Signature`` of a Kafka launch, which its response carries back:
        ``<attempt>.<token>.<mac>``, ``mac`` the HMAC-SHA256 (hex) of RESPONSE_LABEL,
        the attempt, the job's token and the key. It names one try of one job, like
        the callback URL's ``sig``, and is never that ``sig``."""
        inner = self._inner.copy()
        inner.update(RESPONSE_LABEL + f"{attempt}\n{token}\n{correlation_key}".encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return f"{attempt}.{token}.{outer.hexdigest()}"

    def signed_try(self, correlation_key: str, signature: str) -> tuple[int, str] | None:
        """(attempt, token) of the try ``signature`` was issued for, when it is this
        key's :meth:`response_signature` for ``correlation_key`` (checked in constant
        time, written exactly so); None for anything else."""
        attempt, _, rest = signature.partition(".")
        token, _, _ = rest.rpartition(".")
        if not (token and 0 < len(attempt) <= MAX_ATTEMPT_DIGITS and attempt.isascii()
                and attempt.isdigit()):
            return None
        expected = self.response_signature(correlation_key, int(attempt), token)
        if not hmac.compare_digest(expected.encode("utf-8", "replace"),
                                   signature.encode("utf-8", "replace")):
            return None
        return int(attempt), token

    def callback_url(self, public_url: str, correlation_key: str, attempt: int,
                     token: str) -> str:
        # what urlencode({"attempt", "t", "sig"}) and quote(key, safe="") make, without
        # their per-character work for the usual plain keys and tokens (issue 28)
        if _PLAIN_OR_COLON(correlation_key):
            key = correlation_key.replace(":", "%3A")
        else:
            key = quote(correlation_key, safe="")
        t = token if _PLAIN(token) else quote_plus(token)
        sig = self.sign(correlation_key, attempt, token)
        return f"{public_url.rstrip('/')}/v1/responses/{key}?attempt={attempt}&t={t}&sig={sig}"


def connection_name(server: object, client: object) -> str | None:
    """A TCP connection as both its ends name it, from the socket addresses asyncio
    gives (``sockname`` and ``peername`` on the daemon's side, the other way round
    on the CLI's): ``server=127.0.0.1:8080 client=127.0.0.1:50123``. None unless
    both are IP addresses (a Unix socket, a closed transport)."""
    ends = [_endpoint(server), _endpoint(client)]
    if None in ends:
        return None
    return f"server={ends[0]} client={ends[1]}"


def _endpoint(address: object) -> str | None:
    if not (isinstance(address, tuple) and len(address) >= 2
            and isinstance(address[0], str) and isinstance(address[1], int)):
        return None
    try:
        ip = ipaddress.ip_address(address[0].split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack socket names an IPv4 peer so
    host = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    return f"{host}:{address[1]}"


async def load_signer(store: Store, configured: str | None) -> Signer:
    """The configured key, else the one stored in the database (made on first use);
    the database's ``instance`` id (made on first use: the first writer wins, so
    daemons starting together on one database agree)."""
    instance = await store.meta_get_or_set(INSTANCE_META, secrets.token_hex(8))
    key = configured or await store.meta_get_or_set(SIGNING_KEY_META, secrets.token_hex(32))
    return Signer(key, instance=instance)
