"""The PostgreSQL driver's statements of the partner's word (docs/throttling.md): pauses, what
the owners learned of their queues, and a queued job's standing (why it waits).
A mixin of :class:`~hipq.store.postgres.PostgresStore`, whose named-statement
helpers it uses (the blocks are in ``postgres.sql``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hipq.jobs import Job, Ordering
from hipq.store.pgsql import to_json
from hipq.store.records import Backoff, JobStanding, QueueState, backoff_of
from hipq.store.rows import queue_state_of, standing_of, standing_values


class PartnerStatements:
    async def _fetch(self, name: str, **values: Any) -> list[Any]:
        raise NotImplementedError

    async def _fetchrow(self, name: str, **values: Any) -> Any:
        raise NotImplementedError

    async def _execute(self, name: str, **values: Any) -> int:
        raise NotImplementedError

    async def backoff_list(self, *, queues: Sequence[str] | None = None) -> list[Backoff]:
        if queues is None:
            return [backoff_of(r) for r in await self._fetch("backoff_all")]
        return [backoff_of(r) for r in await self._fetch("backoff_list", queues=list(queues))]

    async def backoff_replace(self, *, queue: str, backoffs: Sequence[Backoff]) -> None:
        await self._execute("backoff_replace", queue=queue, scopes=[b.scope for b in backoffs],
                            untils=[b.until for b in backoffs],
                            reasons=[b.reason for b in backoffs],
                            streaks=[b.streak for b in backoffs],
                            sinces=[b.since for b in backoffs])

    async def backoff_clear(self, *, queue: str, now: datetime | None = None) -> int:
        if now is None:
            return await self._execute("backoff_clear", queue=queue)
        row = await self._fetchrow("backoff_clear_due", queue=queue, now=now)
        return int(row["cleared"])

    async def queue_state_list(self, *, queues: Sequence[str] | None = None
                               ) -> dict[str, QueueState]:
        rows = (await self._fetch("queue_state_all") if queues is None
                else await self._fetch("queue_state_list", queues=list(queues)))
        return {r["queue"]: queue_state_of(r) for r in rows}

    async def queue_state_save(self, states: Sequence[QueueState]) -> None:
        if not states:
            return
        await self._execute(
            "queue_state_save", queues=[x.queue for x in states],
            effectives=[x.effective for x in states], successes=[x.successes for x in states],
            decreased_ats=[x.decreased_at for x in states],
            helds=[to_json(x.held) for x in states], held_ats=[x.held_at for x in states],
            totals=[x.throttled_total for x in states],
            learned_rates=[x.learned_rate for x in states],
            learned_sinces=[x.learned_since for x in states],
            budgets=[to_json(x.budget) for x in states])

    async def job_standing(self, *, job: Job, now: datetime, ordering: Ordering, limit: int,
                           key_mode: str = "strict") -> JobStanding:
        name = "standing_time" if ordering is Ordering.TIME_THEN_PRIORITY else "standing_priority"
        row = await self._fetchrow(name, **standing_values(job, now, key_mode, limit))
        return standing_of(json.loads(row["running"]), row["key_ahead"], row["ahead"])
