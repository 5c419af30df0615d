"""The executor: the one part of the engine that awaits the store (docs/internals.md,
"The executor").

A tick's plan (:mod:`hipq.engine.plan`) decides; it yields requests
(:mod:`hipq.engine.requests`) and gets their answers. The executor runs them. It
owns every future the engine keeps and every overlap, and both are laid out here,
in two tables:

* :data:`TICK`, the tick's stages: which steps of the plan run in turn and which
  side by side;
* :meth:`Executor._table`, how each kind of request runs: at once, side by side,
  in the background, written behind, read ahead.

So a new speed trick is a row changed here, never a flag in the plan. Beside the
stage table: the pages read ahead and the archives in flight (kept between
ticks, one of each per queue at most), the hot table's vacuum, and the lock that
keeps the lease plans one at a time.

Failure modes: a request that fails throws its error into the plan where it asked
(the plan may catch it: a claim that hits a taken key); an uncaught one ends the
tick after its stage (the other lanes of the stage end first, so a persist under
way is never cut: docs/internals.md). A read ahead that fails is read again by the
next tick; an archive written behind that fails applied nothing, and its jobs run
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from hipq.engine.decide import Fetch, unique_jobs
from hipq.engine.launcher import Launcher
from hipq.engine.maintenance import Vacuum
from hipq.engine.requests import (
    Alone,
    Answers,
    Archived,
    ArchiveRan,
    Call,
    Collect,
    HandOn,
    InTickRun,
    Launch,
    Moved,
    Plan,
    ReadDue,
    RunInTick,
    TakeAnswers,
    Together,
)
from hipq.engine.result import ReconcileResult
from hipq.errors import HipqError
from hipq.jobs import Job
from hipq.store import Change, Store
from hipq.store.rows import chunks

if TYPE_CHECKING:
    from hipq.engine.plan import TickPlan

log = logging.getLogger(__name__)

T = TypeVar("T")
JobKey = tuple[str, str]

KEEP_SECONDS = 1.0  # a page read ahead is taken within this, else read again
IN_TICK_ARCHIVE_CHUNK = 1000  # tries ended within a tick per statement (several at once)

# The tick, stage by stage (docs/internals.md, "The tick"). A stage is lanes; the steps
# of a lane run in turn, the lanes of a stage side by side (the last one in the tick's
# own task); a stage starts once the one before has ended.
TICK: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("arrived",),),  # step 0
    # step 3's decisions first: a pause the partner just asked for holds this tick's
    # launches back, and step 4 claims no job they re-queue
    (("decide",),),
    # step 3's writes beside steps 1, 2, 4 and 5: they touch other rows (this daemon's
    # running jobs; queued ones). A failed persist leaves the claimed jobs launched.
    (("persist",), ("select", "claim", "launch")),
    (("finish",),),  # the archives of earlier ticks, the partner's word, hand-overs
)


class Executor:
    def __init__(self, store: Store, launcher: Launcher, *, vacuum_every: int) -> None:
        self._store = store
        self.launcher = launcher
        self.vacuum = Vacuum(lambda: self._store.jobs_vacuum(), every=vacuum_every)
        self.pages_ahead = PagesAhead()
        self.archives = ArchivesInFlight()
        self._alone: dict[str, asyncio.Lock] = {}
        self._table = self._stage_table()

    # -- driving plans ---------------------------------------------------------------

    async def tick(self, plan: TickPlan) -> ReconcileResult:
        """Run one tick's plan through the stages of :data:`TICK`; its result."""
        self.archives.tick += 1
        for stage in TICK:
            await self._stage(plan, stage)
        assert plan.result is not None
        return plan.result

    async def _stage(self, plan: TickPlan, lanes: tuple[tuple[str, ...], ...]) -> None:
        beside = [asyncio.ensure_future(self._lane(plan, lane)) for lane in lanes[:-1]]
        try:
            await self._lane(plan, lanes[-1])
        except BaseException:
            for lane in beside:  # never cut short: a persist under way ends first
                with contextlib.suppress(BaseException):
                    await lane
            raise
        for outcome in await asyncio.gather(*beside, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def _lane(self, plan: TickPlan, steps: tuple[str, ...]) -> None:
        for step in steps:
            await self.run(getattr(plan, step)())

    async def run(self, plan: Plan[T]) -> T:
        """Drive ``plan``: each request run, its answer sent back (its error thrown in);
        what the plan returns."""
        answer: Any = None
        error: Exception | None = None
        while True:
            try:
                request = plan.send(answer) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                answer, error = await self.ask(request), None
            except Exception as exc:
                answer, error = None, exc
            except BaseException:  # cancelled: the plan's own clean-up runs now
                plan.close()
                raise

    async def ask(self, request: Any) -> Any:
        """Run one request (or a plan) and answer it."""
        if isinstance(request, Generator):
            return await self.run(request)
        return await self._table[type(request)](request)

    # -- the stage table -------------------------------------------------------------

    def _stage_table(self) -> dict[type, Callable[[Any], Awaitable[Any]]]:
        """How each request runs (docs/internals.md, "The executor")."""
        return {
            Call: self._call,  # at once; the plan waits for it
            Together: self._together,  # side by side, each on its own connection
            ReadDue: self._read_due,  # the page read ahead if fresh; in-flight jobs left out
            ArchiveRan: self._archive_ran,  # a backlog: written behind, next page read ahead
            RunInTick: self._run_in_tick,  # now, beside the launcher's workers, bounded wait
            HandOn: self._hand_on,  # to the launcher
            Launch: self._launch,  # in the background (the launcher's workers)
            TakeAnswers: self._take_answers,  # from the launcher's memory
            Collect: self._collect,  # the archives written behind that are in
            Moved: self._moved,  # the vacuum counts; it runs in the background
            Alone: self._alone_run,  # one plan of its kind at a time
        }

    async def _call(self, request: Call) -> Any:
        return await getattr(self._store, request.method)(*request.args, **request.kwargs)

    async def _together(self, request: Together) -> list[Any]:
        parts = request.parts
        if len(parts) == 1:
            return [await self.ask(parts[0])]
        done = await asyncio.gather(*(self.ask(p) for p in parts), return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        return done

    async def _run_in_tick(self, request: RunInTick) -> InTickRun:
        return await self.launcher.run_in_tick(request.target, request.tries,
                                               wait=request.wait,
                                               concurrency=request.concurrency)

    async def _hand_on(self, request: HandOn) -> None:
        self.launcher.hand_on(request.results)

    async def _launch(self, request: Launch) -> None:
        self.launcher.launch_many(request.launches)

    async def _take_answers(self, request: TakeAnswers) -> Answers:
        launcher = self.launcher
        idle = frozenset(q for q in request.releasing if not launcher.busy(q))
        return Answers(spent=launcher.take_spent(), outcomes=launcher.take_outcomes(),
                       idle=idle, reports=launcher.take_reports())

    async def _moved(self, request: Moved) -> None:
        self.vacuum.count(request.count)

    async def _alone_run(self, request: Alone) -> Any:
        lock = self._alone.get(request.kind)
        if lock is None:
            lock = self._alone[request.kind] = asyncio.Lock()
        async with lock:
            return await self.run(request.plan)

    # -- step 1: due jobs, read ahead --------------------------------------------------

    async def _read_due(self, request: ReadDue) -> list[Job]:
        queue = request.spec.id
        ahead = await self.pages_ahead.take(queue, request.now, widen=request.widen)
        if ahead is not None:
            return ahead
        writing = self.archives.ids(queue)  # still queued until their archive commits
        jobs = await self._read(request, extra=len(writing))
        return [j for j in jobs if j.id not in writing] if writing else jobs

    async def _read(self, request: ReadDue, *, extra: int = 0,
                    ran: Sequence[Job] = ()) -> list[Job]:
        """The reads of ``request`` side by side, each on its own connection, merged in
        plan order (``extra`` rows more; ``ran``: the jobs that ran of the page this
        one follows, read past: :meth:`_read_after`)."""
        spec, now, fetches = request.spec, request.now, request.fetches
        if ran and (page := await self._read_after(request, ran)) is not None:
            return page
        if extra or ran:
            fetches = tuple(replace(f, limit=f.limit + extra + len(ran)) for f in fetches)

        def read(fetch: Fetch) -> asyncio.Future[list[Job]]:
            return asyncio.ensure_future(self._store.job_fetch_due(
                queue=spec.id, now=now, limit=fetch.limit,
                ordering=fetch.ordering or spec.ordering, key_mode=spec.ordering_key_mode,
                critical_only=fetch.critical_only, group=fetch.group,
                default_group_excluding=fetch.default_group_excluding))

        done = await asyncio.gather(*(read(f) for f in fetches), return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        return unique_jobs(batch for batch in done if not isinstance(batch, BaseException))

    async def _read_after(self, request: ReadDue, ran: Sequence[Job]) -> list[Job] | None:
        """The reads of ``request``, its plain read from the job after the last of
        ``ran`` (the jobs that ran of the last page, in the order read): the jobs that
        ran are not read and decoded again, only their ids, to check that no other
        queued job comes up to that last one (enqueued ahead meanwhile, held back).
        None (read from the start) where the reads have another shape, where such a
        job does, or where the store reads from the start anyway."""
        spec, now, fetches = request.spec, request.now, request.fetches
        first, rest = fetches[0] if fetches else None, fetches[1:]
        if (first is None or first.critical_only or first.group is not None
                or first.default_group_excluding is not None
                or not all(f.critical_only for f in rest)):
            return None
        page = self._store.job_fetch_due_after(
            queue=spec.id, now=now, limit=first.limit, ordering=first.ordering or spec.ordering,
            after=ran[-1], ran={j.id for j in ran}, key_mode=spec.ordering_key_mode)
        critical = [self._store.job_fetch_due(  # the jobs that ran are among them: read past
            queue=spec.id, now=now, limit=f.limit + len(ran), ordering=spec.ordering,
            critical_only=True, key_mode=spec.ordering_key_mode) for f in rest]
        reads = await asyncio.gather(page, *critical, return_exceptions=True)
        for read in reads:
            if isinstance(read, BaseException):
                raise read
        if reads[0] is None:
            return None
        return unique_jobs(r for r in reads if isinstance(r, list))

    # -- step 4: in-tick archives, written behind ---------------------------------------

    async def _archive_ran(self, request: ArchiveRan) -> Archived:
        """Claim and archive the tries that ran within their tick. Under a backlog
        (the plan gives the next page) on a store whose reads run beside its writes,
        the next page is read now and the statements are written while the next tick
        runs its functions; that tick collects them (their counts are its). Else they
        are written now."""
        spec, ends = request.spec, request.ends
        done = await self.archives.collect(spec.id)  # the last page's, first
        behind = (request.next_page is not None
                  and self._store.supports_reads_beside_writes)
        if behind:
            assert request.next_page is not None
            self.pages_ahead.start(spec.id, request.now,
                                   self._read(request.next_page, ran=request.ran),
                                   [j.id for j in request.ran])
        writes = self._archive(request)
        if behind and ends:
            self.archives.start(spec.id, writes, ends)
            return Archived(applied=frozenset((c.queue, c.id) for c in ends), done=done,
                            writing=len(ends))
        applied = await writes
        return Archived(applied=frozenset(applied),
                        done=[*done, *(c for c in ends if (c.queue, c.id) in applied)])

    async def _archive(self, request: ArchiveRan) -> set[JobKey]:
        """In a few statements side by side (each on its own connection: the database
        ends them on all its cores); the ones that applied."""
        spec = request.spec
        applied: set[JobKey] = set()
        for part in await asyncio.gather(*(
                self._store.job_archive_ran_many(
                    queue=spec.id, changes=chunk, owner=request.owner, now=request.now,
                    heartbeat_seconds=spec.heartbeat_timeout_seconds)
                for chunk in chunks(request.ends, IN_TICK_ARCHIVE_CHUNK))):
            applied |= part
        return applied

    async def _collect(self, request: Collect) -> list[Change]:
        if request.queues is None:
            return await self.archives.collect_older()
        return [c for queue in request.queues for c in await self.archives.collect(queue)]

    # -- the end -------------------------------------------------------------------------

    async def drain(self) -> None:
        """Until every launch of earlier ticks has finished and been recorded, and the
        vacuum, the pages read ahead and the archives written behind have ended."""
        await self.launcher.drain()
        await self.vacuum.wait()
        await self.pages_ahead.wait()
        await self.archives.wait()

    def stop(self) -> None:
        """No page is read ahead any more."""
        self.pages_ahead.cancel()


@dataclass(slots=True)
class _Page:
    at: datetime
    reads: asyncio.Future[list[Job]]
    exclude: frozenset[str]


class PagesAhead:
    """At most one page read ahead per queue, taken by the queue's next read. The read
    may still see the jobs the tick ran as queued: they are left out when taken."""

    def __init__(self) -> None:
        self._pages: dict[str, _Page] = {}

    def start(self, queue: str, now: datetime, read: Coroutine[Any, Any, list[Job]],
              ran: Sequence[str]) -> None:
        reads = asyncio.ensure_future(read)
        reads.add_done_callback(_quiet)
        self._pages[queue] = _Page(at=now, reads=reads, exclude=frozenset(ran))

    async def take(self, queue: str, now: datetime, *, widen: bool) -> list[Job] | None:
        """The page read ahead if it is as good as a read now: at most
        ``KEEP_SECONDS`` old, not for a widened fetch, and with jobs to run (so the
        ticks go on following each other, and the next one reads afresh what was
        enqueued meanwhile). Else None (the page is dropped)."""
        page = self._pages.pop(queue, None)
        if page is None:
            return None
        try:
            jobs = await page.reads
        except Exception:  # a failed read: the caller reads again, now
            return None
        kept = [j for j in jobs if j.id not in page.exclude]
        if widen or not kept or (now - page.at).total_seconds() > KEEP_SECONDS:
            return None
        return kept

    async def wait(self) -> None:
        """Until every read under way has ended (its page stays to be taken)."""
        for page in list(self._pages.values()):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await page.reads

    def cancel(self) -> None:
        for page in self._pages.values():
            page.reads.cancel()
        self._pages.clear()

    def __len__(self) -> int:
        return len(self._pages)


@dataclass(slots=True)
class _Flight:
    writes: asyncio.Future[set[JobKey]]
    ends: Sequence[Change]
    ids: frozenset[str]
    tick: int  # the tick that started it


class ArchivesInFlight:
    """The archive written behind of each queue: at most one, and none outlives the
    tick after the one that started it (:meth:`collect_older`). Until it commits, its
    jobs still read as queued: every read of the queue's due jobs leaves them out
    (:meth:`ids`)."""

    def __init__(self) -> None:
        self._flights: dict[str, _Flight] = {}
        self.tick = 0  # the executor's tick count, raised at the start of each tick

    def start(self, queue: str, writes: Coroutine[Any, Any, set[JobKey]],
              ends: Sequence[Change]) -> None:
        """Write ``ends`` (``writes``) in the background; the queue's earlier archive
        must have been collected."""
        assert queue not in self._flights, queue
        future = asyncio.ensure_future(writes)
        future.add_done_callback(_quiet)
        self._flights[queue] = _Flight(writes=future, ends=ends,
                                       ids=frozenset(c.id for c in ends), tick=self.tick)

    def ids(self, queue: str) -> frozenset[str]:
        flight = self._flights.get(queue)
        return frozenset() if flight is None else flight.ids

    async def collect(self, queue: str) -> list[Change]:
        """Wait for the queue's archive in flight, if any; the ends that applied."""
        flight = self._flights.pop(queue, None)
        if flight is None:
            return []
        try:
            applied = await flight.writes
        except HipqError as exc:
            log.warning("the archive of %d tries of queue %s run within their tick failed "
                        "(%s); their jobs are still queued and run again", len(flight.ends),
                        queue, exc, extra={"action": "tick_error", "queue": queue})
            return []
        return [c for c in flight.ends if (c.queue, c.id) in applied]

    async def collect_older(self) -> list[Change]:
        """Collect every archive started before the current tick."""
        older = [q for q, f in self._flights.items() if f.tick < self.tick]
        return [c for queue in older for c in await self.collect(queue)]

    async def wait(self) -> None:
        """Until every archive in flight is written (each stays to be collected)."""
        for flight in list(self._flights.values()):
            with contextlib.suppress(Exception):
                await asyncio.shield(flight.writes)

    def __len__(self) -> int:
        return len(self._flights)


def _quiet(future: asyncio.Future[Any]) -> None:
    """A page or an archive nobody collects (the daemon stops, the queue is handed
    over) may have failed: its error is retrieved here, not reported as never
    retrieved; the collector still sees it."""
    if not future.cancelled():
        future.exception()
