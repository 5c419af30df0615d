"""The PostgreSQL driver's statements of the intake (SPEC 16: enqueue from SQL). A
mixin of :class:`~hipq.store.postgres.PostgresStore`, whose named-statement helpers
it uses (the blocks are in ``postgres.sql``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hipq.store.records import IntakeRow, intake_of


class IntakeStatements:
    async def _fetch(self, name: str, **values: Any) -> list[Any]:
        raise NotImplementedError

    async def _fetchrow(self, name: str, **values: Any) -> Any:
        raise NotImplementedError

    async def _execute(self, name: str, **values: Any) -> int:
        raise NotImplementedError

    async def intake_pending(self, *, queues: Sequence[str], limit: int,
                             after: int = 0) -> list[IntakeRow]:
        return [intake_of(r) for r in await self._fetch("intake_pending", queues=list(queues),
                                                         limit=limit, after=after)]

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        return [intake_of(r) for r in await self._fetch(
            "intake_orphans", known=list(known), before=before, limit=limit)]

    async def intake_done(self, *, ingested: Sequence[int], rejected: Mapping[int, str],
                          now: datetime) -> None:
        if ingested or rejected:
            await self._execute("intake_done", ingested=list(ingested),
                                rejected_ids=list(rejected), errors=list(rejected.values()),
                                now=now)

    async def intake_find(self, queue: str, job_id: str) -> IntakeRow | None:
        row = await self._fetchrow("intake_find", queue=queue, job_id=job_id)
        return None if row is None else intake_of(row)

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None
                                   ) -> list[IntakeRow]:
        return [intake_of(r) for r in await self._fetch(
            "intake_rejected_page", limit=limit, queue=queue,
            after_at=None if after is None else after[0],
            after_id=None if after is None else after[1])]

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        return {r["queue"]: (int(r["pending"]), int(r["rejected"]))
                for r in await self._fetch("intake_counts")}

    async def intake_last_id(self) -> int:
        return int((await self._fetchrow("intake_last_id"))["id"])
