"""Wake-ups across daemons: PostgreSQL LISTEN/NOTIFY on a dedicated connection.

Every daemon LISTENs on one channel and NOTIFYs it when work arrives that another
daemon may own (an enqueue, a response): the queue's owner then ticks at once
instead of at its next poll. Payloads say what to do: ``wake`` (run a tick),
``members`` (the cluster changed: rebalance the leases now) or ``intake`` (a
producer committed rows to the intake: ingest them; sent by ``hipq_enqueue()``
and :mod:`hipq.sql` from the producer's transaction).

The listening connection is an asyncpg connection of its own, never a pooled one
(a pooled connection keeps its listener after it goes back to the pool: see
STACK.md). Sends are coalesced: while one NOTIFY is on its way, further calls
with the same payload make one more send after it, not one each. A notification
from this very connection is ignored (its sender already woke itself).

Any role that may connect can NOTIFY the channel, so what is heard passes a
:class:`WakeGate` (docs/scaling.md): payloads other than the three are ignored, and
each payload wakes the daemon at most once per window (:data:`WAKE_WINDOW_SECONDS`,
:data:`MEMBERS_WINDOW_SECONDS` for a rebalance): the first at once, any number
after it within the window as one wake-up at its end. A flood of notifications
makes a bounded number of ticks, and the last of a burst is never lost.

Failure modes: the connection drops (a database restart) -> reconnect with
back-off; meanwhile wake-ups are lost and polling carries the work, as it does
when ``database.notify`` is off (e.g. behind PgBouncer in transaction mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from hipq.clock import Clock, SystemClock
from hipq.store.pg_url import connect_options

log = logging.getLogger(__name__)

CHANNEL = "hipq_wake"
WAKE = "wake"
MEMBERS = "members"
INTAKE = "intake"  # hipq_enqueue() / hipq.sql: rows in the intake (docs/from-your-database.md)
PAYLOADS = frozenset({WAKE, MEMBERS, INTAKE})  # what a notification may say
WAKE_WINDOW_SECONDS = 0.05  # a wake or intake wake-up at most once per window
MEMBERS_WINDOW_SECONDS = 1.0  # a rebalance of the leases at most once per window
RETRY_MIN_SECONDS = 0.2
RETRY_MAX_SECONDS = 5.0


def asyncpg_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as asyncpg takes it."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


class WakeGate:
    """Coalesces and rate-limits the wake-ups notifications ask for: ``deliver`` is
    called with a known payload at most once per window of that payload (its first
    at once when the last delivery is a window old, the others of the window as one
    call at its end, by an event loop timer); unknown payloads are counted and
    dropped. Windows are measured on ``clock``'s monotonic time."""

    def __init__(self, deliver: Callable[[str], None], *, clock: Clock,
                 window: float = WAKE_WINDOW_SECONDS,
                 members_window: float = MEMBERS_WINDOW_SECONDS) -> None:
        self._deliver = deliver
        self._clock = clock
        self._windows = {WAKE: window, INTAKE: window, MEMBERS: members_window}
        self._last: dict[str, float] = {}  # payload -> when it was last delivered
        self._held: dict[str, asyncio.TimerHandle] = {}  # payload -> its delivery to come
        self.ignored = 0  # unknown payloads heard

    def heard(self, payload: str) -> None:
        window = self._windows.get(payload)
        if window is None:
            self.ignored += 1
            return
        if payload in self._held:
            return  # a delivery is due at the window's end: this one joins it
        since = self._clock.monotonic() - self._last.get(payload, -window)
        if since >= window:
            self._send(payload)
            return
        self._held[payload] = asyncio.get_running_loop().call_later(
            window - since, self._release, payload)

    def _release(self, payload: str) -> None:
        self._held.pop(payload, None)
        self._send(payload)

    def _send(self, payload: str) -> None:
        self._last[payload] = self._clock.monotonic()
        self._deliver(payload)

    def close(self) -> None:
        """Drop the deliveries still to come (the listener stops)."""
        for handle in self._held.values():
            handle.cancel()
        self._held.clear()


class Notifier:
    def __init__(self, url: str, *, on_notify: Callable[[str], None],
                 clock: Clock | None = None) -> None:
        # the DSN and the keywords the pool uses too (hipq.store.pg_url)
        self.url, self._connect_keywords = connect_options(asyncpg_url(url))
        self.on_notify = on_notify
        self.gate = WakeGate(on_notify, clock=clock or SystemClock())
        self.heard = 0  # notifications heard from others (before the gate)
        self._conn: Any = None
        self._pid: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._sending: dict[str, bool] = {}  # payload -> one more send wanted

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def wait_connected(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), seconds)
        return self._connected.is_set()

    async def _run(self) -> None:
        delay = RETRY_MIN_SECONDS
        while True:
            closed = asyncio.Event()
            try:
                conn = await asyncpg.connect(self.url, **self._connect_keywords)
            except Exception as exc:  # whatever it is, polling carries on; retry later
                log.warning("notify: cannot connect (%s); polling meanwhile", exc,
                            extra={"action": "notify_error"})
                await asyncio.sleep(delay)  # noqa: TID251  (back-off, not logic)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                continue
            delay = RETRY_MIN_SECONDS
            conn.add_termination_listener(lambda _c, ev=closed: ev.set())
            try:
                await conn.add_listener(CHANNEL, self._received)
                self._conn, self._pid = conn, conn.get_server_pid()
                self._connected.set()
                self.on_notify(MEMBERS)  # missed notifications: look again
                await closed.wait()
                log.warning("notify: connection lost; reconnecting",
                            extra={"action": "notify_error"})
            except Exception as exc:  # the loop must outlive any error of the connection
                log.warning("notify: %s; reconnecting", exc, extra={"action": "notify_error"})
                await asyncio.sleep(delay)  # noqa: TID251  (back-off, not logic)
            finally:
                self._conn = None
                self._connected.clear()
                with contextlib.suppress(Exception):
                    conn.terminate()

    def _received(self, _conn: Any, pid: int, _channel: str, payload: str) -> None:
        if pid != self._pid:
            self.heard += 1
            self.gate.heard(payload)

    def notify(self, payload: str = WAKE) -> None:
        """Tell the other daemons (in the background; coalesced)."""
        if self._conn is None:
            return
        if payload in self._sending:
            self._sending[payload] = True
            return
        self._sending[payload] = False
        task = asyncio.create_task(self._send(payload))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _send(self, payload: str) -> None:
        try:
            while True:
                conn = self._conn
                if conn is None:
                    return
                try:
                    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.debug("notify: send failed: %s", exc)
                    return
                if not self._sending.get(payload):
                    return
                self._sending[payload] = False
        finally:
            self._sending.pop(payload, None)

    async def send_now(self, payload: str) -> None:
        """Send and wait (a stopping daemon's last word)."""
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)

    async def stop(self) -> None:
        self.gate.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
