"""Wake-ups by notification are coalesced and rate-limited; unknown payloads are
ignored (hipq/store/notify.py; docs/scaling.md). Any role that may connect can
``NOTIFY hipq_wake``: a flood of notifications makes a bounded number of wake-ups,
not one each, and the last of a burst is never lost (a wake-up follows it)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import asyncpg  # type: ignore[import-untyped]
import pytest

from hipq.store.notify import CHANNEL, INTAKE, MEMBERS, WAKE, Notifier, WakeGate
from hipq.testing import FakeClock

FLOOD = ("members", "wake", "intake", "junk", "", "x" * 7000, "members ", "WAKE")


async def _until(condition: object, what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)  # the deliveries' own timers run meanwhile


async def test_a_flood_makes_one_wake_up_per_payload_and_window() -> None:
    clock = FakeClock()
    woken: list[str] = []
    gate = WakeGate(woken.append, clock=clock, window=0.02, members_window=0.05)
    for _ in range(10_000):
        for payload in FLOOD:
            gate.heard(payload)
    assert woken == [MEMBERS, WAKE, INTAKE]  # the first of each, at once; junk ignored
    await _until(lambda: len(woken) == 6, "the last of the flood was not delivered")
    assert sorted(woken[3:]) == sorted([MEMBERS, WAKE, INTAKE])  # one more each, after it
    assert gate.ignored == 10_000 * 5
    clock.advance(1.0)
    gate.heard(WAKE)  # a window later: delivered at once again
    assert woken[-1] == WAKE
    assert len(woken) == 7
    gate.close()


async def test_a_quiet_gate_delivers_every_notification_at_once() -> None:
    clock = FakeClock()
    woken: list[str] = []
    gate = WakeGate(woken.append, clock=clock)
    for _ in range(3):
        gate.heard(INTAKE)
        clock.advance(1.0)
    assert woken == [INTAKE] * 3
    gate.close()


on_postgres = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@on_postgres
async def test_a_flood_of_notify_from_any_role_makes_bounded_wake_ups(db_url: str) -> None:
    woken: list[tuple[float, str]] = []
    notifier = Notifier(db_url, on_notify=lambda p: woken.append((time.monotonic(), p)))
    notifier.start()
    sender = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        assert await notifier.wait_connected(10)
        await _until(lambda: woken, "the first look after connecting")  # MEMBERS
        woken.clear()
        started = time.monotonic()
        sent = 0
        last_sent: dict[str, float] = {}
        for n in range(400):
            # the eight payloads of a round in one round trip (one transaction: they
            # arrive together at its commit), so the flood outpaces the gate's windows
            # however busy the machine is (a round trip for each notification, on a
            # loaded machine, made 427 wake-ups of 3,200, each window's due)
            payloads = [p if p != "junk" else f"junk{n}" for p in FLOOD]
            for payload in FLOOD:
                last_sent[payload] = time.monotonic()
            await sender.execute("; ".join(f"SELECT pg_notify('{CHANNEL}', '{payload}')"
                                           for payload in payloads))
            sent += len(payloads)
        await _until(lambda: notifier.heard >= sent, "the flood did not arrive")

        def followed(kind: str) -> bool:
            return any(p == kind and t >= last_sent[kind] for t, p in woken)

        # the last notification of each kind is followed by a wake-up (not lost)
        await _until(lambda: all(followed(k) for k in (MEMBERS, WAKE, INTAKE)),
                     "the last of the flood was not delivered")
        elapsed = time.monotonic() - started
        counts = Counter(p for _, p in woken)
        assert set(counts) == {MEMBERS, WAKE, INTAKE}  # unknown payloads ignored
        assert counts[MEMBERS] <= elapsed / 1.0 + 3, (counts, elapsed)
        for payload in (WAKE, INTAKE):
            assert counts[payload] <= elapsed / 0.05 + 3, (counts, elapsed)
        assert sum(counts.values()) < sent / 20, (counts, sent)
    finally:
        await sender.close()
        await notifier.stop()
