"""The storage contract: what the engine, the service, the API and the Kafka
consumer may ask of a database, whatever the database.

One driver per database implements :class:`Store` (:mod:`hipq.store.sqlite`,
:mod:`hipq.store.postgres`, both on :mod:`hipq.store.driver`), and
:func:`hipq.store.open_store` picks one by URL; a third keeps everything in memory
(:mod:`hipq.store.memory`, ``memory://``), a test double. ``tests/contract`` runs
every test against all three (a test of a SQL driver's own work against the two
databases only).

Guarantees common to every method:

* Each call is atomic: one transaction (or one statement), so a crash keeps all of
  its writes or none. Batch methods are named ``*_many``.
* Times are taken from the arguments (``now``), never from the database clock.
* Updates of running jobs are guarded in the statement (status, attempt, owner):
  a repeat, or a race with another owner, changes nothing, and what a method
  returns is what it changed.
* Driver errors are translated: :class:`~hipq.errors.TransientStoreError` when the
  database is unreachable (retry later; the connection pool starts over), other
  :class:`~hipq.errors.StoreError` subclasses for what retrying will not fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any, Protocol

from hipq.jobs import Attempt, Job, Ordering
from hipq.store.records import (
    INTAKE_MAX_BYTES,
    INTAKE_READ_BYTES,
    INTAKE_VALUE_CHARS,
    Backoff,
    Change,
    InboxOutcome,
    InboxPage,
    InboxRow,
    InsertOutcome,
    IntakeRow,
    JobHistory,
    JobStanding,
    ListedJob,
    ListedResponse,
    QueueRecord,
    QueueState,
    QueueStats,
    Response,
)
from hipq.store.seen import PartnerMinute, PartnerSeen


class Store(Protocol):
    """A durable store of queues, jobs, their history and the response inbox."""

    @property
    def dialect(self) -> str:
        """The database's name: ``"postgresql"`` or ``"sqlite"`` (``"memory"``: the
        store in memory, which behaves as a single writer, as SQLite)."""

    @property
    def supports_row_locks(self) -> bool:
        """Whether concurrent claims are arbitrated by row locks (``SKIP LOCKED``);
        without them the database has a single writer and claims are serialized."""

    @property
    def supports_reads_beside_writes(self) -> bool:
        """Whether a read runs beside a write, on another connection of a pool,
        instead of waiting for it (the engine then reads a page ahead while it
        writes: docs/internals.md, "The executor")."""

    @property
    def supports_notify(self) -> bool:
        """Whether a process can wake the others that share the database
        (PostgreSQL's LISTEN/NOTIFY); without it they poll."""

    # -- lifecycle ---------------------------------------------------------------------

    async def close(self) -> None:
        """Close every pooled connection; the store is unusable afterwards."""

    async def ping(self) -> None:
        """Round-trip to the database. Raises TransientStoreError if unreachable."""

    async def migrate(self) -> int:
        """Create or upgrade the schema; idempotent. Returns the schema version.

        Raises:
            SchemaError: the database has a newer schema than this hipq.
        """

    async def check_schema(self) -> None:
        """Raises :class:`~hipq.errors.SchemaError` unless the database is migrated
        to exactly this version (an unreadable version counts as not migrated)."""

    async def meta_get_or_set(self, key: str, value: str) -> str:
        """The stored value of ``key``, storing ``value`` first if absent: the first
        writer wins, every later caller (any process) gets its value."""

    # -- queues ------------------------------------------------------------------------

    async def queue_upsert(self, settings: Mapping[str, Any], *, now: datetime) -> bool:
        """Create or replace a queue's settings (``created_at`` is kept on replace):
        ``settings`` is their JSON mapping, with ``id`` (and ``paused``, false when
        missing), kept as given (``QueueConfig.stored()`` at the edge). Returns True
        if it was created."""

    async def queue_get(self, queue_id: str) -> QueueRecord | None:
        """The queue, or None."""

    async def queue_list(self) -> list[QueueRecord]:
        """Every queue, sorted by id. Called every tick: a queue's spec is made
        again only when its stored row changed."""

    async def queue_set_paused(self, queue_id: str, paused: bool, *, now: datetime) -> bool:
        """Pause or resume a queue. Returns False if there is no such queue."""

    # -- enqueue -----------------------------------------------------------------------

    async def job_insert_many(self, new_jobs: Sequence[Job]) -> list[InsertOutcome]:
        """Insert queued jobs, idempotently per (queue, id); one outcome per input,
        in input order.

        A job whose (queue, id) exists, live or archived, is ``exists`` (with the
        stored job) when its ``body_hash`` matches and ``conflict`` otherwise; a
        fixed correlation key already used by a live job is a ``conflict`` too. A
        (queue, id) repeated within the call is judged against what its first
        occurrence left stored. Chunks of the batch are written atomically each.
        """

    async def job_merge(self, job: Job) -> InsertOutcome:
        """Enqueue into a merging queue: append ``job.data["payloads"]`` to the
        still-queued, never-launched job of the same ordering key (its newest), or
        insert ``job`` if there is none. Idempotent per job id: a merged id is
        remembered, and repeating it answers ``exists`` (same body) or
        ``conflict`` with the job that holds it."""

    # -- reading jobs --------------------------------------------------------------------

    async def job_get(self, queue: str, job_id: str) -> Job | None:
        """The job wherever it is: the hot table, else the archive; a job merged into
        another answers with the job that holds it."""

    async def job_get_listed(self, queue: str, job_id: str, *,
                             value_chars: int) -> ListedJob | None:
        """:meth:`job_get` as a listing of many shows the job (``GET /v1/job-search``):
        each of its ``data``, ``result`` and ``error`` whose JSON text is longer than
        ``value_chars`` characters comes as that text cut there, in ``cut``, and
        empty in the job; a shorter one comes whole. A SQL driver cuts in its
        statement, so a large value is never read whole; the read is the same
        primary-key lookups as :meth:`job_get`'s."""

    async def job_attempts(self, queue: str, job_id: str) -> list[Attempt]:
        """The job's whole history: its recorded tries (including late responses),
        by attempt, then in the order they were recorded."""

    async def job_history(self, queue: str, job_id: str, *, limit: int) -> JobHistory:
        """What a job's JSON shows: the last ``limit`` entries of its history (in
        :meth:`job_attempts` order) and how many it has in all. Reads at most
        ``limit`` rows and counts the rest through the index; the entries come
        without the responses' bodies (``response`` is None), and an error whose
        JSON text is longer than :data:`~hipq.store.listing.ENTRY_ERROR_CHARS` as
        ``{"kind", "detail", "truncated": true}`` cut, never read whole."""

    async def job_list_archived(self, *, queue: str | None = None, status: str | None = None,
                                limit: int = 100,
                                after: tuple[datetime, str, str] | None = None) -> list[Job]:
        """Archived jobs, newest first by (finished_at, queue, id); ``after`` is the
        last key of the previous page (keyset pagination: no gaps, no repeats)."""

    async def job_list_live(self, *, queue: str, state: str, ordering: Ordering,
                            limit: int, after: Sequence[Any] | None = None) -> list[Job]:
        """The live jobs of a queue, keyset-paginated (operator views, not the hot
        path). ``state="queued"``: in queue order (``ordering``: (priority, run_at,
        id) or (run_at, priority, id)); ``state="running"``: by launch time
        (launched_at, id). ``after`` is the sort key of the previous page's last job
        (the columns above, in order)."""

    async def job_load_running(self, *, queue: str, ids: Sequence[str] | None = None,
                               after_id: str | None = None,
                               limit: int | None = None) -> list[Job]:
        """The running jobs of a queue, whoever owns them, by id: what a new owner
        adopts (a page of ``limit`` after ``after_id``), or those among ``ids`` (jobs
        the batch let go, read back)."""

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        """Live jobs by correlation key (for responses not matched in memory);
        unknown keys are absent."""

    # -- the reconcile loop ------------------------------------------------------------

    async def job_count_due(self, *, queue: str, now: datetime, limit: int) -> int:
        """How many queued jobs of ``queue`` are due at ``now``, counted up to
        ``limit`` (an index range of at most ``limit`` entries)."""

    async def job_fetch_due(self, *, queue: str, now: datetime, limit: int,
                            ordering: Ordering, critical_only: bool = False,
                            group: str | None = None,
                            default_group_excluding: Sequence[str] | None = None,
                            key_mode: str = "strict") -> list[Job]:
        """At most ``limit`` queued jobs of ``queue`` with ``run_at <= now``, in the
        queue's ``ordering`` (time then priority when ``critical_only``), without
        locking them.

        ``group`` keeps one quota group; ``default_group_excluding`` keeps the jobs
        in none of the listed groups. A job with an ordering key is due only if it
        heads its key: no job of the key runs and none queued comes before it
        (``key_mode="relaxed_on_retry"``: a job waiting for its retry does not hold
        the later ones back).
        """

    async def job_fetch_due_after(self, *, queue: str, now: datetime, limit: int,
                                  ordering: Ordering, after: Job, ran: AbstractSet[str],
                                  key_mode: str = "strict") -> list[Job] | None:
        """:meth:`job_fetch_due`'s plain read (no group), from the job after
        ``after`` in ``ordering``; or None where every queued job due at ``now``
        from the first up to ``after`` is not in ``ran`` (the tries that ran of the
        page ending at ``after``): one was enqueued ahead of it meanwhile, or was
        held back, and a read from the start is needed. None also where the driver
        has no such read (the caller reads from the start)."""

    async def launch_events_recent(self, *, queue: str,
                                   since: datetime) -> dict[str, list[datetime]]:
        """Launch times after ``since`` per rate group (recorded by
        :meth:`job_mark_running_many`); older events are deleted."""

    async def launch_events_restamp(self, *, queue: str, at: datetime) -> int:
        """Stamp the queue's stored launch events with ``at`` (an adoption: the dead
        owner's launches arrived before it, see :mod:`hipq.engine.rates`); returns
        how many."""

    async def launch_events_replace(self, *, queue: str, since: datetime,
                                    events: Sequence[tuple[str, datetime]]) -> None:
        """In one transaction, delete the queue's launch events stamped at or after
        ``since`` and record ``events`` (group, time) instead (a handover: the owner's
        launches with their answer times)."""

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        """Step 4: claim jobs as running in one atomic step; returns the claimed
        jobs as now stored, in the order of ``ids``.

        Only jobs of ``queue`` still ``queued`` are claimed (a cancel in between
        wins); a job another process is claiming at the same time is skipped, never
        claimed twice. Each claimed job gets attempt + 1, ``launched_at = now``, a
        deadline of ``now`` plus its timeout (or ``heartbeat_seconds`` if shorter),
        ``owner``, an unconfirmed launch and, unless its key is fixed, the
        correlation key ``~token.attempt`` (``GENERATED_KEY_PREFIX``). For a
        claimed id in ``rate_groups`` a launch event of its group is recorded in
        the same transaction. ``known`` holds the jobs as fetched (by id): a driver
        may build the answer from them instead of reading the rows back.
        """

    async def job_archive_ran_many(self, *, queue: str, changes: Sequence[Change],
                                   owner: str, now: datetime,
                                   heartbeat_seconds: float | None) -> set[tuple[str, str]]:
        """Steps 4 and 3 at once for tries that ran within their tick (an in-process
        target: :mod:`hipq.engine.inline`): each change (ARCHIVE, at the try's
        attempt) applies only if its job is still ``queued`` at the attempt before;
        the job is archived as if claimed by ``owner`` at ``now`` (attempt, launch
        time, deadline, confirmed launch, key as :meth:`job_mark_running_many` sets
        them) and ended by the change, and the try is recorded. A job cancelled,
        changed or being claimed meanwhile is left as it is. Returns the (queue, id)
        of the changes that applied."""

    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        """Record that these launches (queue, id, attempt) reached their target;
        only jobs running under ``owner`` at that attempt. Returns how many."""

    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[tuple[str, str]]:
        """Step 3: persist the batch's changes and inbox outcomes in one transaction.

        A change applies only if its job still runs under ``owner`` at the change's
        attempt. ARCHIVE moves the job to the archive with its status, result and
        error; REQUEUE puts it back to queued at ``run_at`` (with new data if
        given; the correlation key cleared unless fixed); EXTEND moves its
        deadline. ARCHIVE and REQUEUE record the try. The responses of a change
        (``inbox_ids``) are marked applied only if it applied; ``inbox`` rows are
        marked with their outcome unconditionally (if still unapplied). Returns the
        (queue, id) of the changes that applied.
        """

    async def jobs_vacuum(self) -> bool:
        """Reclaim the space of jobs long gone from the hot table, if the database
        needs it. True if done; False where there is nothing to do or it is not
        allowed (the caller stops asking)."""

    async def job_adopt_running(self, *, queue: str, owner: str, now: datetime) -> int:
        """Make ``owner`` the owner of every running job of the queue (a lease
        takeover), in one statement. Returns how many."""

    async def job_reschedule_many(self, *, queue: str, run_ats: dict[str, datetime],
                                  now: datetime) -> int:
        """Move queued jobs to a new ``run_at`` (a throttler's reschedule); jobs no
        longer queued are left alone. Returns how many moved."""

    async def job_archive_queued_many(self, *, queue: str, ends: dict[str, tuple[str, Any]],
                                      now: datetime) -> list[Job]:
        """End queued jobs without a launch: id -> (terminal status, error). Jobs no
        longer queued are left alone. Returns the archived jobs."""

    async def job_expired_sweep(self, *, now: datetime, limit: int) -> list[Job]:
        """Archive as ``expired`` at most ``limit`` queued jobs whose ``expires_at``
        passed, earliest first, in any queue. Returns what it archived."""

    async def job_cancel_queued(self, *, queue: str, job_id: str, now: datetime) -> Job | None:
        """Archive a queued job as ``cancelled``; None if it is not queued."""

    # -- the response inbox --------------------------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        """Write responses durably, received at ``now``. Returns each row id in input
        order, or None for a duplicate ``dedup_key`` (already in the inbox, or
        earlier in the call)."""

    async def inbox_pending_for_keys(self, keys: Sequence[str]) -> list[InboxRow]:
        """Unapplied responses for these correlation keys, oldest (lowest id) first."""

    async def inbox_pending_scan(self, *, after_id: int, before: datetime, limit: int,
                                 max_chars: int | None = None) -> InboxPage:
        """Unapplied responses with id > ``after_id`` received before ``before``, by
        id, at most ``limit``: one page of step 0's read or of the sweep. With
        ``max_chars``, the page also ends before the first row, past its first one,
        whose ``result`` and ``error`` JSON text would bring the page's past
        ``max_chars`` characters: what a page holds in memory is bounded by both,
        whatever the responses weigh (one row may still weigh more on its own)."""

    async def inbox_mark_many(self, marks: Sequence[tuple[int, InboxOutcome]], *,
                              now: datetime) -> None:
        """Mark inbox rows with their outcome; rows already marked keep theirs."""

    async def inbox_list_unmatched(self, *, limit: int = 100,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = 4096) -> list[ListedResponse]:
        """Responses marked ``unmatched``, newest first by (received_at, id), at most
        ``limit``; ``after`` is the (received_at, id) of the previous page's last
        one (keyset pagination: no gaps, no repeats among rows already marked).
        Pending and otherwise marked rows are never listed.

        What a page costs is bounded by ``limit``, whatever is stored: a
        ``result`` or ``error`` whose JSON text is longer than ``value_chars``
        characters comes back as its first ``value_chars`` characters of JSON text
        (a string), named in ``truncated``; a shorter one comes back whole. The
        read is an index range scan of the unmatched rows only, however many
        other responses the inbox holds."""

    async def archived_by_attempt_keys(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(queue, job id) by correlation key of past tries and archived jobs: the
        history of late responses. Unknown keys are absent."""

    async def attempt_record_late_many(self, rows: Sequence[tuple[str, str, InboxRow]], *,
                                       now: datetime) -> None:
        """Record (queue, job id, response) of responses that came after their try
        ended, as ``late_response`` tries; a response without an attempt number is
        recorded on the latest try that had its key.

        At most :data:`~hipq.store.history.LATE_PER_TRY` (10) late responses are
        recorded per try (job and attempt), the first ones in ``rows`` order, however
        many come in one call, across calls, or from several processes at once; the
        others are left out (their caller still marks them late in the inbox)."""

    # -- leases ------------------------------------------------------------------------

    async def lease_acquire_many(self, *, queues: Sequence[str], owner: str, now: datetime,
                                 seconds: float) -> set[str]:
        """Acquire or renew leases until ``now + seconds``; returns the queues
        ``owner`` holds now. A lease of another owner is taken only once expired;
        a renewal keeps ``acquired_at``."""

    async def lease_release_all(self, *, owner: str) -> int:
        """Drop every lease of ``owner``. Returns how many."""

    async def lease_release_many(self, *, queues: Sequence[str], owner: str) -> int:
        """Drop the leases of these queues that ``owner`` holds (a handover); leases
        of other owners are left alone. Returns how many."""

    async def lease_list(self) -> dict[str, tuple[str, datetime]]:
        """Every lease row: queue -> (owner, expires_at), expired ones included."""

    # -- membership ----------------------------------------------------------------------

    async def daemon_heartbeat(self, *, owner: str, now: datetime,
                               seconds: float) -> list[str]:
        """Register ``owner`` as live until ``now + seconds`` (``started_at`` kept on
        a renewal); forget daemons expired for longer than ``seconds``. Returns the
        live daemons (``expires_at >= now``), sorted, ``owner`` included."""

    async def daemon_leave(self, *, owner: str) -> None:
        """Remove ``owner`` from the live set (a graceful stop)."""

    # -- stats and housekeeping --------------------------------------------------------

    # -- the intake: enqueue from SQL (docs/from-your-database.md) --------------------------

    async def intake_pending(self, *, queues: Sequence[str], limit: int, after: int = 0,
                             max_bytes: int = INTAKE_MAX_BYTES,
                             budget: int = INTAKE_READ_BYTES) -> list[IntakeRow]:
        """At most ``limit`` pending intake rows of these queues with ids above
        ``after``, oldest first, measured before they are read: those that start
        under ``budget`` bytes of data and fields (so at most ``budget`` and one
        row); a row over ``max_bytes`` comes without its data and fields, and a row
        the store cannot read with why (``problem``)."""

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        """Pending rows enqueued before ``before`` for queues not in ``known``
        (without their values: they are rejected as such)."""

    async def intake_done(self, *, ingested: Sequence[int], rejected: Mapping[int, str],
                          now: datetime) -> None:
        """Delete the ingested rows; keep the rejected ones with their error; in one
        transaction, only rows still pending."""

    async def intake_find(self, queue: str, job_id: str) -> IntakeRow | None:
        """The oldest pending row that will make this job, if any, read as
        :meth:`intake_pending` reads it with the stored limit (:meth:`intake_limit_set`)."""

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = INTAKE_VALUE_CHARS) -> list[IntakeRow]:
        """Rejected rows, newest first by (rejected_at, id), after a page's last key;
        rows whose rejection time hipq cannot read are left for :meth:`intake_prune`.
        A string or a value's JSON text over ``value_chars`` comes cut (``cut``)."""

    async def intake_prune(self, *, before: datetime, now: datetime, limit: int) -> int:
        """Delete at most ``limit`` rejected rows, oldest first: rejected before
        ``before``, or carrying a rejection time hipq does not write (none, or more
        than a day past ``now``). Returns how many (``limit``: call again)."""

    async def intake_limit_set(self, max_bytes: int) -> None:
        """Store the intake's limit (``api.max_body_bytes``), which
        ``hipq_enqueue()`` refuses past and :meth:`intake_find` reads with."""

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        """Per queue: (pending, rejected) rows."""

    async def intake_last_id(self) -> int:
        """The largest intake row id so far (0: none): a cheap sign of new rows."""

    # -- the partner's word (docs/throttling.md) -------------------------------------------

    async def backoff_list(self, *, queues: Sequence[str] | None = None) -> list[Backoff]:
        """The partners' pauses of these queues (None: of every queue), including
        those whose time has passed (readers compare ``until`` with their now)."""

    async def backoff_replace(self, *, queue: str, backoffs: Sequence[Backoff]) -> None:
        """The owner's pauses of ``queue``, all of them: any other row of it goes."""

    async def backoff_clear(self, *, queue: str, now: datetime | None = None) -> int:
        """End every pause of ``queue`` (a resume); how many there were. With ``now``,
        in the same transaction, the queue's queued jobs that wait because the partner
        said "not now" to their last try (given back: error kind ``throttled`` with
        ``in_a_row`` and ``data.from_partner`` true) and are due later than ``now`` are
        due at ``now``; jobs waiting for a ``run_after``, a retry's back-off or a
        producer's ``throttled`` status keep their time."""

    async def queue_state_list(self, *, queues: Sequence[str] | None = None
                               ) -> dict[str, QueueState]:
        """What the owners learned of these queues (None: of every queue)."""

    async def queue_state_save(self, states: Sequence[QueueState]) -> None:
        """Write these queue states (each whole), in one transaction."""

    # -- what the owner sees of a partner (docs/http-api.md, "Partners") ---------------------

    async def partner_seen_save(self, *, seen: Sequence[PartnerSeen],
                                minutes: Sequence[PartnerMinute], before: datetime) -> None:
        """The owner's word on its partners, in one transaction: each snapshot written
        whole (its partner's row replaced); each minute added to its partner's row of
        that minute (:func:`hipq.store.seen.added`: counts summed, ``in_flight_max``
        the larger, learned rate and buckets replaced; a new row if none); then the
        rows of the minutes' partners before ``before`` deleted (at most an hour of
        minutes is kept per partner)."""

    async def partner_seen_list(self, *, partners: Sequence[str] | None = None
                                ) -> dict[str, PartnerSeen]:
        """The partners' last snapshots by partner (None: every stored one); a
        partner never written is absent."""

    async def partner_minutes_list(self, *, partner: str, since: datetime
                                   ) -> list[PartnerMinute]:
        """The partner's minutes from ``since`` on, oldest first (a range of its
        primary key: at most the hour kept)."""

    # -- why a job waits (docs/throttling.md) ----------------------------------------------

    async def job_standing(self, *, job: Job, now: datetime, ordering: Ordering, limit: int,
                           key_mode: str = "strict") -> JobStanding:
        """Where the queued ``job`` stands in its queue at ``now``, in one read (one
        statement, or one transaction), for one job when asked, never by a tick:

        * ``running``: the weight of the queue's running jobs by (critical,
          ``group_key``, the quota field's value at enqueue); reads the running jobs
          of the queue only;
        * ``key_ahead``: the id of the first job of its ordering key by
          (``key_order_at``, id) that holds it back as :meth:`job_fetch_due` sees it:
          one running, or one queued before it (``key_mode="relaxed_on_retry"``: not
          one waiting for its retry at ``now``); None without a key; stops at the first;
        * ``ahead``: how many queued jobs of the queue, due at ``now``, come before it
          in ``ordering`` ((run_at, priority, id) or (priority, run_at, id)), counted up
          to ``limit`` (an index range of at most ``limit`` entries).
        """

    async def queue_stats(self, *, now: datetime) -> list[QueueStats]:
        """Counts per queue (every queue, sorted by id), as of ``now``."""

    async def inbox_counts(self) -> dict[str, int]:
        """Responses in the inbox by outcome (``pending`` for those not yet marked)."""

    async def archive_prune(self, *, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` archived jobs finished before ``before``, oldest
        first, with their tries, and at most ``limit`` inbox rows applied before
        ``before``. Returns the larger of the two counts (``limit`` means there may
        be more: call again)."""
