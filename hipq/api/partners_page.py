"""``GET /v1/partners`` and ``GET /v1/partners/{id}`` (docs/http-api.md, "Partners"):
every declared partner as the owner of its queues last wrote it
(:mod:`hipq.engine.seen`): its buckets, the concurrency in use, the learned rate;
one partner also with its busiest keys and its last hour per minute (accepted and
refused). Read from the store, so every daemon answers the same and a restart keeps
the history; a declared partner nobody wrote yet answers its configured buckets,
nothing used. The reads are bounded: one row per declared partner, the hour's 60
rows of one partner's minutes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web
from pydantic import AwareDatetime, Field

from hipq.api.api_errors import ApiError
from hipq.api.deps import DEPS
from hipq.api.io import reply
from hipq.api.models import _Out
from hipq.config_fields import QUEUE_ID_PATTERN
from hipq.engine.seen import configured_buckets
from hipq.metrics import PartnerGauge
from hipq.spec import PartnerSpec
from hipq.store.seen import PartnerMinute, PartnerSeen, minute_of

MINUTES_SHOWN = 60  # the current minute and the 59 before it
KEYS_SHOWN = 10  # a partner's busiest keys
_PARTNER_ID = re.compile(QUEUE_ID_PATTERN)


class PartnerBucketOut(_Out):
    name: str = Field(description="the bucket's name in the metrics, e.g. requests_per_60s "
                      "(reported_NAME: one the partner reported without its window)")
    unit: str = Field(description="requests or cost")
    limit: float | None = Field(description="how many requests (or how much cost) per "
                                "per_seconds (null: the partner did not say)")
    per_seconds: float | None
    used: float | None = Field(description="what the window holds as of updated_at")
    remaining: float | None = Field(description="what is left as of updated_at: limit - used, "
                                    "never below 0; a partner's bucket, as it reported")
    room_at: AwareDatetime | None = Field(
        default=None, description="when one more request (or a launch of the default cost) "
        "fits: updated_at when it fits now; null: nothing written yet")
    source: str = Field(description="configured (the partner's limits) or partner "
                        "(the partner's own headers set it)")


class PartnerKeyOut(_Out):
    key: str = Field(description="the value at the partner's by")
    in_flight: int
    learned_rate: float | None
    accepted_total: int
    refused_total: int
    buckets: list[PartnerBucketOut]


class PartnerMinuteOut(_Out):
    minute: AwareDatetime = Field(description="the minute's start (UTC)")
    accepted: int = Field(description="launches the partner's budget let go in it")
    refused: int = Field(description="tries the partner refused in it")
    in_flight_max: int = Field(description="the largest weight in flight seen in it")
    learned_rate: float | None = Field(description="launches a second, as last seen in it")


class PartnerSummaryOut(_Out):
    id: str
    by: str | None = Field(description="the path into data whose values have buckets of "
                           "their own (each bucket shows the fullest key's)")
    owner: str | None = Field(description="the daemon that wrote this; null: nobody yet")
    updated_at: AwareDatetime | None = Field(description="when its owner wrote it (at most "
                                             "once a second while it holds the queues)")
    concurrency: int | None = Field(description="the weight in flight it allows (null: no "
                                    "limit)")
    in_flight: int = Field(description="the weight in flight through it, every key together")
    learned_rate: float | None = Field(description="launches a second learned from refusals "
                                       "that gave no time (null: nothing learned)")
    accepted_total: int = Field(description="launches let go by its current owner, in all")
    refused_total: int = Field(description="tries it refused, counted by its current owner")
    buckets: list[PartnerBucketOut]


class PartnerOut(PartnerSummaryOut):
    keys: list[PartnerKeyOut] = Field(description=f"with by: the {KEYS_SHOWN} busiest keys "
                                      "(most in flight, then most launched)")
    key_count: int = Field(description="with by: the keys its owner keeps")
    minutes: list[PartnerMinuteOut] = Field(description=f"the last {MINUTES_SHOWN} minutes, "
                                            "oldest first (a minute with nothing: zeros)")


class PartnerList(_Out):
    partners: list[PartnerSummaryOut]


def _buckets(found: Any) -> list[PartnerBucketOut]:
    """The buckets as stored (:func:`hipq.engine.seen.normal_bucket` made them)."""
    return [PartnerBucketOut.model_validate(b) for b in (found if isinstance(found, list) else ())]


def _summary(spec: PartnerSpec, seen: PartnerSeen | None) -> dict[str, Any]:
    snap: Mapping[str, Any] = {} if seen is None else seen.snapshot
    buckets = snap.get("buckets") if seen is not None else configured_buckets(spec)
    return {"id": spec.id, "by": spec.by, "concurrency": spec.concurrency,
            "owner": None if seen is None else seen.owner,
            "updated_at": None if seen is None else seen.updated_at,
            "in_flight": int(snap.get("in_flight") or 0),
            "learned_rate": snap.get("learned_rate"),
            "accepted_total": int(snap.get("accepted_total") or 0),
            "refused_total": int(snap.get("refused_total") or 0),
            "buckets": _buckets(buckets)}


def _keys(snap: Mapping[str, Any]) -> list[PartnerKeyOut]:
    keys = snap.get("keys")
    return [PartnerKeyOut(key=str(k.get("key")), in_flight=int(k.get("in_flight") or 0),
                          learned_rate=k.get("learned_rate"),
                          accepted_total=int(k.get("accepted_total") or 0),
                          refused_total=int(k.get("refused_total") or 0),
                          buckets=_buckets(k.get("buckets")))
            for k in (keys if isinstance(keys, list) else [])[:KEYS_SHOWN]]


def _minutes(rows: list[PartnerMinute], first: datetime) -> list[PartnerMinuteOut]:
    """The hour from ``first`` on, minute by minute (zeros where nothing was written)."""
    by_minute = {row.minute: row for row in rows}
    out = []
    for i in range(MINUTES_SHOWN):
        at = first + timedelta(minutes=i)
        row = by_minute.get(at)
        out.append(PartnerMinuteOut(
            minute=at, accepted=0 if row is None else row.accepted,
            refused=0 if row is None else row.refused,
            in_flight_max=0 if row is None else row.in_flight_max,
            learned_rate=None if row is None else row.learned_rate))
    return out


async def partner_gauges(app: web.Application) -> list[PartnerGauge]:
    """The gauges of every declared partner (``/metrics``): one read of their rows."""
    deps = app[DEPS]
    names = sorted(deps.partners)
    stored = await deps.service.store.partner_seen_list(partners=names) if names else {}
    gauges = []
    for name in names:
        summary = _summary(deps.partners[name], stored.get(name))
        remaining: dict[str, float] = {}
        for bucket in summary["buckets"]:  # two buckets of one name: the smaller room
            if bucket.remaining is not None:
                remaining[bucket.name] = min(bucket.remaining,
                                             remaining.get(bucket.name, bucket.remaining))
        gauges.append(PartnerGauge(partner=name, remaining=remaining,
                                   in_flight=summary["in_flight"],
                                   learned_rate=summary["learned_rate"]))
    return gauges


async def list_partners(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    declared = deps.partners
    names = sorted(declared)
    stored = await deps.service.store.partner_seen_list(partners=names) if names else {}
    return reply(PartnerList(partners=[PartnerSummaryOut.model_validate(
        _summary(declared[p], stored.get(p))) for p in names]))


async def get_partner(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    partner_id = request.match_info["partner"]
    if not _PARTNER_ID.fullmatch(partner_id):
        raise ApiError(422, "invalid_id", f"partner id must match {QUEUE_ID_PATTERN}")
    spec = deps.partners.get(partner_id)
    if spec is None:
        raise ApiError(404, "partner_not_found",
                       f"no partner {partner_id!r} is declared under partners")
    store, now = deps.service.store, deps.service.clock.now()
    seen = (await store.partner_seen_list(partners=[partner_id])).get(partner_id)
    first = minute_of(now) - timedelta(minutes=MINUTES_SHOWN - 1)
    rows = await store.partner_minutes_list(partner=partner_id, since=first)
    snap: Mapping[str, Any] = {} if seen is None else seen.snapshot
    return reply(PartnerOut.model_validate({
        **_summary(spec, seen), "keys": _keys(snap),
        "key_count": int(snap.get("key_count") or 0), "minutes": _minutes(rows, first)}))
