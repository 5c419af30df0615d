"""The HTTP target: ``{kind: http, url, mode: callback|sync, timeout_seconds, headers, auth}``.

Each launch is one ``POST`` of ``{"id", "queue", "data", "attempt", "max_attempts",
"correlation_key", "callback_url"}`` with the header ``Hipq-Correlation-Key`` (and for
a job with a trace, the try's ``traceparent`` and ``tracestate``: docs/traces.md), to
the URL template rendered with ``{queue}`` and ``{id}`` (URL-quoted).

How answers map to outcomes:

* ``callback`` mode: 2xx means accepted (the launch is confirmed; the outcome
  arrives later at ``callback_url``);
* ``sync`` mode: 2xx means succeeded, the body (JSON, else text) is the result;
* both modes: 429, and 503 with ``Retry-After``, are the partner's "not now": the
  try ends ``throttled`` (given back, its scope paused: docs/throttling.md) with the time the
  partner gave (``Retry-After`` in seconds or as an HTTP date, else
  ``RateLimit-Reset`` / ``X-RateLimit-Reset``: seconds, or an epoch time when
  larger than a year); other 4xx fail the job without retry, except 408; 5xx and
  408 are retryable failures (kind ``http_status``, with the status and the start
  of the body recorded on the try); a connection error is a retryable ``transport``
  failure; no answer within ``timeout_seconds`` is a ``timeout`` (its outcome is
  unknown, so an ``at_most_once`` queue does not retry it);
* a 2xx that says the partner's budget is spent (``RateLimit-Remaining: 0`` or
  ``X-RateLimit-Remaining: 0``, or ``RateLimit: ...remaining=0`` / ``r=0``, with a
  reset) carries ``spent`` (the reset): the scope pauses until then, before the
  partner has to refuse anything.

Hostile downstreams: at most :data:`MAX_ANSWER_BYTES` of an answer are read (and
kept); redirects are not followed (a 3xx is a retryable failure); NUL characters
and non-finite numbers in an answer never reach the store. The partner's time
goes in the try's error data as ``retry_after`` (seconds as a number, or an ISO 8601
time); the engine caps a pause at ``backoff.max_partner_seconds``. A time is read
strictly (docs/throttling.md, "Who may pause, and for how long"): ASCII digits, or
an ASCII HTTP date; anything else (``"\xb2"``, ``"1e3"``, other scripts' digits) is
no time, never an error.

All targets of a daemon share one :class:`HttpClient`, whose keep-alive
connections are :mod:`hipq.targets.http_pool`'s (at most :data:`CONNECTION_LIMIT`
requests in flight per origin); each target (one per queue) bounds its own requests
in flight (``max_in_flight``). Waiting for a slot (the target's, then the origin's)
counts within ``timeout_seconds``: a launch never takes longer in all, and no slot in
time is a ``timeout`` like no answer in time. The target's ``headers`` may replace
the ``User-Agent``, ``Accept-Encoding`` and ``Content-Type`` it sends by default, not
the headers that frame the request (``Host``, ``Content-Length``, ``Connection``...).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import ssl
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from hipq import json_text, tracing
from hipq.config import HttpTarget as HttpTargetConfig
from hipq.errors import ConfigError, TransientLaunchError
from hipq.jobs import ErrorKind, Job
from hipq.responses.signing import Signer
from hipq.targets.http_pool import Answer, Endpoint, HttpPool, HttpTransportError, header_block
from hipq.targets.interface import ACCEPTED, Accepted, Completed, LaunchOutcome
from hipq.values import json_problem

CORRELATION_HEADER = "Hipq-Correlation-Key"
CONNECTION_LIMIT = 200  # requests in flight (and sockets) per downstream origin
DEFAULT_HEADERS = {"User-Agent": "hipq", "Accept-Encoding": "identity",
                   "Content-Type": "application/json"}
BODY_EXCERPT = 2000  # characters of a failing answer kept on the try
RETRYABLE_4XX = frozenset({408, 429})
MAX_ANSWER_BYTES = 64 * 1024  # what is read of an answer (and kept as a result)
RETRY_AFTER_STATUSES = frozenset({429, 503})
EPOCH_AFTER_SECONDS = 365 * 86400.0  # a reset larger than this is an epoch time
MAX_PARTNER_NUMBER = 1e9  # seconds: a longer Retry-After reads as this (capped later)
_LAST_TIME = datetime.max.replace(tzinfo=UTC).isoformat()
_DIGITS = re.compile(r"[0-9]+").fullmatch  # ASCII only, as [0-9] is (\d is not)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?").fullmatch
_ENCODE = json_text.compact  # a launch's body


class HttpClient:
    """The daemon's keep-alive connections, and what callback URLs need."""

    def __init__(self, *, signer: Signer | None = None, public_url: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.signer = signer
        self.public_url = public_url
        self._ssl = ssl_context  # None: the system's trust store
        self._pool: HttpPool | None = None

    async def start(self) -> None:
        self._pool = HttpPool(limit=CONNECTION_LIMIT, cap=MAX_ANSWER_BYTES,
                              ssl_context=self._ssl)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> HttpPool:
        if self._pool is None:
            raise TransientLaunchError("the HTTP client is not started")
        return self._pool

    def callback_url(self, correlation_key: str, job: Job) -> str | None:
        """The signed URL where the downstream reports this try of ``job``."""
        if self.signer is None or self.public_url is None:
            return None
        return self.signer.callback_url(self.public_url, correlation_key, job.attempt,
                                        job.token)


def auth_header(auth: dict[str, str] | None) -> dict[str, str]:
    """``{type: bearer, token}`` or ``{type: basic, username, password}``."""
    if not auth:
        return {}
    kind = auth.get("type", "bearer" if "token" in auth else "basic")
    if kind == "bearer" and auth.get("token"):
        return {"Authorization": f"Bearer {auth['token']}"}
    if kind == "basic" and "username" in auth:
        pair = f"{auth['username']}:{auth.get('password', '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    raise ConfigError("target auth must be {type: bearer, token: ...} or "
                      "{type: basic, username: ..., password: ...}")


class HttpTarget:
    def __init__(self, config: HttpTargetConfig, client: HttpClient | None) -> None:
        if not config.url.startswith(("http://", "https://")):
            raise ConfigError(f"target url {config.url!r} must start with http:// or https://")
        self.config = config
        self.client = client
        self._fixed = request_headers({**config.headers, **auth_header(config.auth)})
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._target: Endpoint | None = None  # parsed once unless a template
        if "{queue}" not in config.url and "{id}" not in config.url:
            try:
                self._target = Endpoint.parse(config.url)
            except ValueError as exc:
                raise ConfigError(f"target url: {exc}") from None

    def url_for(self, job: Job) -> str:
        return (self.config.url.replace("{queue}", quote(job.queue, safe=""))
                .replace("{id}", quote(job.id, safe="")))

    def body_for(self, job: Job, key: str) -> dict[str, Any]:
        callback = self.client.callback_url(key, job) if self.client else None
        return {"id": job.id, "queue": job.queue, "data": job.data, "attempt": job.attempt,
                "max_attempts": job.max_attempts, "correlation_key": key,
                "callback_url": callback}

    async def launch(self, job: Job) -> LaunchOutcome:
        if self.client is None:
            raise TransientLaunchError("no HTTP client: HTTP targets run inside a daemon")
        key = job.correlation_key or ""
        try:
            headers = self._fixed + header_block(
                ((CORRELATION_HEADER, key),) if job.trace is None  # the try's traceparent
                else ((CORRELATION_HEADER, key), *tracing.try_headers()))
        except ValueError:
            return Completed(status="failed", retryable=False, kind=ErrorKind.TRANSPORT,
                             error={"detail": "the correlation key cannot be sent in an "
                                              "HTTP header (it has a line break or NUL)"})
        target = self._target or _parse_url(self.url_for(job))
        body = _ENCODE(self.body_for(job, key)).encode()
        try:
            answer = await self._post(self.client.pool, target, headers, body)
        except TimeoutError:
            raise TransientLaunchError(f"no answer within {self.config.timeout_seconds}s",
                                       kind=ErrorKind.TIMEOUT) from None
        except HttpTransportError as exc:
            raise TransientLaunchError(f"{exc}"[:BODY_EXCERPT],
                                       kind=ErrorKind.TRANSPORT) from None
        return partner_outcome(self._outcome(answer.status, answer.content_type,
                                             answer_text(answer)), answer, target)

    async def _post(self, pool: HttpPool, target: Endpoint, headers: bytes,
                    body: bytes) -> Answer:
        """One of the target's slots, then the request: both within the launch's
        timeout (TimeoutError)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.timeout_seconds
        if self._slots.locked():  # wait for a slot (a free one is taken without a timer)
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        else:
            await self._slots.acquire()
        try:
            return await pool.post(target, headers, body, within=deadline - loop.time())
        finally:
            self._slots.release()

    async def close(self) -> None:
        return None  # the session belongs to the daemon's HttpClient

    def _outcome(self, status: int, content_type: str, text: str) -> LaunchOutcome:
        if 200 <= status < 300:
            if self.config.mode == "callback":
                return ACCEPTED
            return Completed(status="succeeded", result=_parse(content_type, text))
        retryable = status >= 500 or status in RETRYABLE_4XX or status < 400
        return Completed(status="failed", retryable=retryable, kind=ErrorKind.HTTP_STATUS,
                         error={"detail": f"HTTP {status}", "status": status,
                                "body": text[:BODY_EXCERPT]})


def answer_text(answer: Answer) -> str:
    """The answer's body (at most MAX_ANSWER_BYTES) as text without NUL characters."""
    try:
        text = answer.body.decode(answer.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = answer.body.decode("utf-8", errors="replace")
    return text.replace("\x00", "\ufffd")


def request_headers(configured: dict[str, str]) -> bytes:
    """The header block every launch of a target sends: its configured headers (and
    auth) over the defaults. ConfigError for a value that would break the request (the
    config refuses framing headers and such values in ``headers``; this catches them
    in ``auth``)."""
    names = {name.lower() for name in configured}
    merged = [(k, v) for k, v in DEFAULT_HEADERS.items() if k.lower() not in names]
    try:
        return header_block([*merged, *configured.items()])
    except ValueError as exc:
        raise ConfigError(f"target headers: {exc}") from None


def _parse_url(url: str) -> Endpoint:
    try:
        return Endpoint.parse(url)
    except ValueError as exc:
        raise TransientLaunchError(f"the target URL is not usable: {exc}"[:BODY_EXCERPT],
                                   kind=ErrorKind.TRANSPORT) from None


def retry_after(answer: Answer) -> float | str | None:
    """The answer's ``Retry-After``: seconds (a number, at most
    :data:`MAX_PARTNER_NUMBER`) or an aware ISO time; None for anything but ASCII
    digits or an ASCII HTTP date (docs/throttling.md: such a value is ignored)."""
    raw = answer.headers.get("retry-after", "").strip(" \t")
    if not raw or answer.status not in RETRY_AFTER_STATUSES:
        return None
    if _DIGITS(raw):  # not str.isdigit: it takes "\xb2", which int() refuses
        digits = raw.lstrip("0")
        return float(int(digits or "0")) if len(digits) <= 9 else MAX_PARTNER_NUMBER
    if not raw.isascii():  # the date parser reads other scripts' digits too
        return None
    try:
        when = parsedate_to_datetime(raw)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.astimezone(UTC).isoformat()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _seconds_or_epoch(raw: str) -> float | str | None:
    """A reset: whole or decimal seconds from now (ASCII digits), or an epoch time
    (ISO) when larger than a year (one past the last representable time: the last);
    None if not such a number (float() takes "1e3", "nan", "1_000" and other
    scripts' digits: none of them is)."""
    raw = raw.strip(" \t")
    if _DECIMAL(raw) is None:
        return None
    whole = raw.partition(".")[0].lstrip("0")
    value = float(raw) if len(whole) <= 12 else math.inf
    if value > EPOCH_AFTER_SECONDS:
        try:
            return datetime.fromtimestamp(value, UTC).isoformat()
        except (OverflowError, OSError, ValueError):
            return _LAST_TIME
    return value


def _structured(header: str) -> dict[str, str]:
    """The parameters of a ``RateLimit`` header (``limit=10, remaining=0, reset=3``
    or ``"policy";r=0;t=3``), lower-cased names."""
    out: dict[str, str] = {}
    for part in header.replace(";", ",").split(","):
        name, eq, value = part.partition("=")
        if eq:
            out.setdefault(name.strip().lower(), value.strip().strip('"'))
    return out


def budget(answer: Answer) -> tuple[str | None, str | None]:
    """(remaining, reset) as the answer's rate-limit headers give them."""
    h = answer.headers
    remaining = h.get("ratelimit-remaining") or h.get("x-ratelimit-remaining")
    reset = h.get("ratelimit-reset") or h.get("x-ratelimit-reset")
    if (remaining is None or reset is None) and "ratelimit" in h:
        params = _structured(h["ratelimit"])
        remaining = remaining or params.get("remaining") or params.get("r")
        reset = reset or params.get("reset") or params.get("t")
    return remaining, reset


def partner_time(answer: Answer) -> float | str | None:
    """When the partner says to come back: ``Retry-After``, else the rate-limit
    reset."""
    after = retry_after(answer)
    if after is None:
        _, reset = budget(answer)
        after = None if reset is None else _seconds_or_epoch(reset)
    return after


def is_throttled(answer: Answer) -> bool:
    """429, or 503 with ``Retry-After``: the partner's "not now"."""
    return answer.status == 429 or (answer.status == 503 and "retry-after" in answer.headers)


def budget_headers(answer: Answer) -> tuple[tuple[str, str], ...]:
    """The answer's rate-limit headers (IETF, X-RateLimit, OpenAI's, Anthropic's), for
    the engine to read with its clock (:func:`hipq.partners.headers.read`)."""
    return tuple((n, v) for n, v in answer.headers.items() if "ratelimit" in n)


def partner_outcome(outcome: LaunchOutcome, answer: Answer,
                    target: Endpoint) -> LaunchOutcome:
    """The outcome as the partner's word changes it: a throttled try, or a success
    that says the budget is spent (docs/throttling.md); with the answer's rate-limit
    headers, if any."""
    headers = budget_headers(answer)
    if headers:
        outcome = replace(outcome, budget=headers)
    if is_throttled(answer):
        detail = f"HTTP {answer.status} from {target.origin[0]}://{target.host_header}"
        error: dict[str, Any] = {"detail": detail, "status": answer.status,
                                 "body": answer_text(answer)[:BODY_EXCERPT]}
        after = partner_time(answer)
        if after is not None:
            error["retry_after"] = after
        return Completed(status="throttled", kind=ErrorKind.THROTTLED, error=error,
                         budget=headers)
    if 200 <= answer.status < 300:
        remaining, reset = budget(answer)
        if remaining is not None and reset is not None and remaining.strip() == "0":
            spent = _seconds_or_epoch(reset)
            if spent is not None:
                if isinstance(outcome, Completed):
                    return Completed(status=outcome.status, result=outcome.result,
                                     error=outcome.error, retryable=outcome.retryable,
                                     kind=outcome.kind, spent=spent, budget=headers)
                return Accepted(spent=spent, budget=headers)
    return outcome


def _parse(content_type: str, text: str) -> Any:
    if not text:
        return None
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return text
        return text if json_problem(value) is not None else value  # unstorable: keep text
    return text
