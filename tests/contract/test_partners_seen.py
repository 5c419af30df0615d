"""What the owner of a partner's queues writes of the partner, on every store (SQLite,
PostgreSQL, memory; docs/http-api.md, "Partners"): its last snapshot, replaced whole,
and its minutes, added to (counts summed, the largest in flight kept, the learned rate
and buckets the newest), the partner's rows older than an hour deleted as it writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq.store import Store
from hipq.store.seen import PartnerMinute, PartnerSeen, minute_of
from hipq.testing import FakeClock

BUCKETS = [{"unit": "requests", "limit": 500.0, "per_seconds": 60.0, "used": 12.0},
           {"unit": "cost", "limit": 90000.0, "per_seconds": 60.0, "used": 3100.5}]


def _snapshot(in_flight: int, **extra: Any) -> dict[str, Any]:
    return {"id": "llm", "in_flight": in_flight, "buckets": BUCKETS,
            "keys": [{"key": "k1", "in_flight": 1}], "note": "ünïcode", **extra}


async def test_a_partners_snapshot_is_replaced_whole(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    first = PartnerSeen(partner="llm", snapshot=_snapshot(3), updated_at=now, owner="a")
    other = PartnerSeen(partner="maps", snapshot={"id": "maps"}, updated_at=now, owner="a")
    await store.partner_seen_save(seen=[first, other], minutes=[], before=now)
    assert await store.partner_seen_list(partners=["llm"]) == {"llm": first}
    assert list(await store.partner_seen_list()) == ["llm", "maps"]
    assert await store.partner_seen_list(partners=["nobody"]) == {}

    later = clock.advance(1.5)
    again = PartnerSeen(partner="llm", snapshot={"id": "llm", "in_flight": 0}, updated_at=later,
                        owner="b")
    await store.partner_seen_save(seen=[again], minutes=[], before=later)
    got = await store.partner_seen_list(partners=["llm", "maps"])
    assert got == {"llm": again, "maps": other}  # no merge of the old snapshot
    assert (got["llm"].updated_at, got["llm"].owner) == (later, "b")

    got["llm"].snapshot["in_flight"] = 99  # type: ignore[index]  # a copy: nothing stored changes
    assert (await store.partner_seen_list(partners=["llm"]))["llm"] == again


async def test_minutes_are_added_to_and_pruned_after_an_hour(store: Store,
                                                            clock: FakeClock) -> None:
    start = minute_of(clock.now())

    def minute(at: int, accepted: int, refused: int, in_flight: int, rate: float | None,
               partner: str = "llm", used: float = 1.0) -> PartnerMinute:
        return PartnerMinute(partner=partner, minute=start + timedelta(minutes=at),
                             accepted=accepted, refused=refused, in_flight_max=in_flight,
                             learned_rate=rate, buckets=[{**BUCKETS[0], "used": used}])

    await store.partner_seen_save(seen=[], minutes=[minute(0, 10, 1, 4, None),
                                                    minute(0, 7, 0, 2, None, "maps")],
                                  before=start - timedelta(hours=1))
    await store.partner_seen_save(seen=[], minutes=[minute(0, 5, 2, 3, 40.5, used=9.0)],
                                  before=start - timedelta(hours=1))
    await store.partner_seen_save(seen=[], minutes=[minute(1, 1, 0, 1, 41.0)],
                                  before=start - timedelta(hours=1))
    got = await store.partner_minutes_list(partner="llm", since=start - timedelta(hours=1))
    assert got == [minute(0, 15, 3, 4, 40.5, used=9.0), minute(1, 1, 0, 1, 41.0)]
    assert await store.partner_minutes_list(partner="llm", since=start + timedelta(minutes=1)) \
        == [minute(1, 1, 0, 1, 41.0)]
    assert await store.partner_minutes_list(partner="nobody", since=start) == []

    # an hour later: the partner's older rows go as it writes; another partner's stay
    hour = 61
    await store.partner_seen_save(seen=[], minutes=[minute(hour, 2, 0, 0, None)],
                                  before=start + timedelta(minutes=hour) - timedelta(hours=1))
    got = await store.partner_minutes_list(partner="llm", since=start - timedelta(hours=1))
    assert [m.minute for m in got] == [start + timedelta(minutes=1),
                                       start + timedelta(minutes=hour)]
    assert got[-1].learned_rate is None
    assert [m.accepted for m in await store.partner_minutes_list(
        partner="maps", since=start - timedelta(hours=1))] == [7]


async def test_a_snapshot_and_its_minute_are_written_together(store: Store,
                                                             clock: FakeClock) -> None:
    now = clock.now()
    seen = PartnerSeen(partner="llm", snapshot=_snapshot(2), updated_at=now, owner="a")
    one = PartnerMinute(partner="llm", minute=minute_of(now), accepted=3, refused=0,
                        in_flight_max=2, learned_rate=None, buckets=[])
    await store.partner_seen_save(seen=[seen], minutes=[one], before=now - timedelta(hours=1))
    await store.partner_seen_save(seen=[], minutes=[], before=now)  # nothing: no change
    assert await store.partner_seen_list() == {"llm": seen}
    assert await store.partner_minutes_list(partner="llm", since=minute_of(now)) == [one]
