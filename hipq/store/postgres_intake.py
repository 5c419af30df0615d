"""The PostgreSQL driver's statements of the intake (docs/from-your-database.md). A
mixin of :class:`~hipq.store.postgres.PostgresStore`, whose named-statement helpers
it uses (the blocks are in ``postgres.sql``). Every read is bounded in bytes before
a value is read (docs/from-your-database.md, "Limits")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hipq.store.records import (
    EARLIEST,
    FUTURE_REJECTION,
    INTAKE_ID_CHARS,
    INTAKE_LIMIT_KEY,
    INTAKE_MAX_BYTES,
    INTAKE_OTHER,
    INTAKE_OTHER_NAMES,
    INTAKE_QUEUE_CHARS,
    INTAKE_READ_BYTES,
    INTAKE_VALUE_CHARS,
    LATEST,
    IntakeRow,
    intake_of,
    listed_intake_of,
)

_TIMES = {"earliest": EARLIEST, "latest": LATEST}


class IntakeStatements:
    async def _fetch(self, name: str, **values: Any) -> list[Any]:
        raise NotImplementedError

    async def _fetchrow(self, name: str, **values: Any) -> Any:
        raise NotImplementedError

    async def _execute(self, name: str, **values: Any) -> int:
        raise NotImplementedError

    async def intake_pending(self, *, queues: Sequence[str], limit: int, after: int = 0,
                             max_bytes: int = INTAKE_MAX_BYTES,
                             budget: int = INTAKE_READ_BYTES) -> list[IntakeRow]:
        rows = await self._fetch("intake_pending", queues=list(queues), limit=limit,
                                 after=after, max_bytes=max_bytes, budget=budget,
                                 id_chars=INTAKE_ID_CHARS, **_TIMES)
        return [intake_of(r, max_bytes=max_bytes) for r in rows]

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        return [intake_of(r) for r in await self._fetch(
            "intake_orphans", known=list(known), before=before, limit=limit,
            queue_chars=INTAKE_QUEUE_CHARS, id_chars=INTAKE_ID_CHARS)]

    async def intake_done(self, *, ingested: Sequence[int], rejected: Mapping[int, str],
                          now: datetime) -> None:
        if ingested or rejected:
            await self._execute("intake_done", ingested=list(ingested),
                                rejected_ids=list(rejected), errors=list(rejected.values()),
                                now=now)

    async def intake_find(self, queue: str, job_id: str) -> IntakeRow | None:
        row = await self._fetchrow("intake_find", queue=queue, job_id=job_id,
                                   limit_key=INTAKE_LIMIT_KEY, default_bytes=INTAKE_MAX_BYTES,
                                   **_TIMES)
        return None if row is None else intake_of(row)

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = INTAKE_VALUE_CHARS) -> list[IntakeRow]:
        return [listed_intake_of(r) for r in await self._fetch(
            "intake_rejected_page", limit=limit, queue=queue, value_chars=value_chars,
            after_at=None if after is None else after[0],
            after_id=None if after is None else after[1], **_TIMES)]

    async def intake_prune(self, *, before: datetime, now: datetime, limit: int) -> int:
        return await self._execute("intake_prune", before=before,
                                   ahead=now + FUTURE_REJECTION, limit=limit)

    async def intake_limit_set(self, max_bytes: int) -> None:
        await self._execute("meta_set", key=INTAKE_LIMIT_KEY, value=str(max_bytes))

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        return {r["queue"]: (int(r["pending"]), int(r["rejected"]))
                for r in await self._fetch("intake_counts", others=INTAKE_OTHER_NAMES,
                                           other=INTAKE_OTHER)}

    async def intake_last_id(self) -> int:
        return int((await self._fetchrow("intake_last_id"))["id"])
