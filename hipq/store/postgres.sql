-- Every statement of the PostgreSQL driver (hipq/store/postgres.py), loaded once at
-- import by hipq/store/pgsql.py and run on asyncpg: a block runs from its
-- "-- name: NAME" line to the next one; comment lines are dropped; ":param"
-- placeholders become asyncpg's $1, $2... in order of first appearance ("::type"
-- casts are left alone). The schema itself is made by the numbered files of
-- hipq/store/migrations/postgresql/.
--
-- How these statements reach rows of jobs, and why:
-- * A batch travels as one array per column (unnest), or as one JSON array, so each
--   statement text is fixed and asyncpg prepares it once per connection.
-- * Rows of jobs are found one batch row at a time through the primary key, in a
--   LATERAL subquery with LIMIT 1, which the planner never flattens into a join: no
--   estimate (a table without statistics, or statistics saying no job has an owner,
--   which made "owner = :owner" look like one row) can turn it into a scan of the
--   backlog per batch row. The subquery returns the row's ctid. (A plan made while
--   the table was empty or tiny after a VACUUM or ANALYZE can: a sequential scan is
--   then the cheapest probe. Hence every run is planned for the tables as they are,
--   plan_cache_mode = force_custom_plan; see hipq/store/pg_pool.py.)
-- * The statement then joins jobs on that ctid alone, twice: "j.ctid = hit.tid"
--   and "j.ctid = ANY(ARRAY(SELECT tid FROM hit))". The join condition alone let
--   the planner hash the whole table once a batch was large; the = ANY gives it a
--   TID scan of just those rows. A row changed since by another transaction has a
--   new ctid and is left alone.
-- * The hot table holds only 'queued' and 'running' rows, and a job has an owner
--   only while running, so "owner = :owner" with the attempt says "running, ours,
--   this try", and "status <> 'running'" says "queued".
-- * JSON values travel as text and are cast to jsonb here.
-- * Statuses in predicates are literals ('queued'), never parameters, so generic
--   plans (a prepared statement's after five runs, where the database URL asks for
--   plan_cache_mode=auto) still use the partial indexes.
-- * Keyset pages take the previous page's last key, or NULLs for the first page:
--   COALESCE puts a bound before (after) every stored key in its place ('infinity',
--   '-infinity', the smallest int4, ''), so the row comparison stays an index
--   condition in a generic plan (an "IS NULL OR" would not).

-- -- lifecycle -----------------------------------------------------------------------

-- name: ping
SELECT 1

-- name: advisory_lock
-- A transaction-scoped advisory lock (released at commit): migrations, late responses.
SELECT pg_advisory_xact_lock(:key::int8)

-- name: meta_exists
SELECT to_regclass('hipq_meta') IS NOT NULL

-- name: meta_get
SELECT value FROM hipq_meta WHERE key = :key

-- name: meta_add
INSERT INTO hipq_meta (key, value) VALUES (:key, :value) ON CONFLICT (key) DO NOTHING

-- name: meta_set
INSERT INTO hipq_meta (key, value) VALUES (:key, :value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value

-- -- queues --------------------------------------------------------------------------

-- name: queue_upsert
-- Create or replace a queue's settings (created_at kept); returns whether it is new
-- (the statement's snapshot is taken before its insert).
WITH before AS (SELECT 1 FROM queues WHERE id = :id),
upserted AS (
    INSERT INTO queues (id, config, paused, created_at, updated_at)
    VALUES (:id, :config::text::jsonb, :paused, :now, :now)
    ON CONFLICT (id) DO UPDATE SET config = excluded.config, paused = excluded.paused,
        updated_at = excluded.updated_at)
SELECT NOT EXISTS (SELECT 1 FROM before) AS created

-- name: queue_get
SELECT * FROM queues WHERE id = :id

-- name: queues
SELECT * FROM queues ORDER BY id

-- name: queue_set_paused
UPDATE queues SET paused = :paused, updated_at = :now WHERE id = :id

-- -- enqueue -------------------------------------------------------------------------

-- (new jobs: hipq.store.pgsql.insert_jobs_statement, one INSERT per shape of batch)

-- name: merged_get
-- A job id already merged into another job (a merging queue's repeat).
SELECT into_id, body_hash FROM merged_jobs WHERE queue = :queue AND id = :id

-- name: merge_host
-- The newest still-queued, never-launched job of an ordering key, locked.
SELECT * FROM jobs
WHERE queue = :queue AND ordering_key = :ordering_key AND status = 'queued' AND attempt = 0
ORDER BY key_order_at DESC, id DESC LIMIT 1 FOR UPDATE

-- name: merge_update
UPDATE jobs SET data = :data::text::jsonb, updated_at = :now WHERE queue = :queue AND id = :id

-- name: merged_insert
INSERT INTO merged_jobs (queue, id, into_id, body_hash, created_at)
VALUES (:queue, :id, :into_id, :body_hash, :created_at)

-- -- reading jobs --------------------------------------------------------------------

-- name: live_by_ids
SELECT * FROM jobs WHERE queue = :queue AND id = ANY(:ids::text[])

-- name: archived_by_ids
SELECT * FROM archived_jobs WHERE queue = :queue AND id = ANY(:ids::text[])

-- name: live_listed
-- A live job as a listing of many shows it (GET /v1/job-search, hipq/store/listing.py):
-- its columns but data, result and error, and each of those whole (*_whole) when its
-- JSON text is at most :value_chars characters long, else that text cut there (*_cut).
SELECT queue, id, status, run_at, expires_at, priority, weight, critical, timeout_seconds,
       correlation_key, ordering_key, attempt, max_attempts, created_at, updated_at,
       launched_at, replay_of, trace,
       CASE WHEN length(data::text) <= :value_chars THEN data END AS data_whole,
       CASE WHEN length(data::text) > :value_chars
            THEN substr(data::text, 1, :value_chars) END AS data_cut,
       CASE WHEN length(result::text) <= :value_chars THEN result END AS result_whole,
       CASE WHEN length(result::text) > :value_chars
            THEN substr(result::text, 1, :value_chars) END AS result_cut,
       CASE WHEN length(error::text) <= :value_chars THEN error END AS error_whole,
       CASE WHEN length(error::text) > :value_chars
            THEN substr(error::text, 1, :value_chars) END AS error_cut
FROM jobs WHERE queue = :queue AND id = :id

-- name: archived_listed
-- An archived job as live_listed reads a live one.
SELECT queue, id, status, run_at, expires_at, priority, weight, critical, timeout_seconds,
       correlation_key, ordering_key, attempt, max_attempts, created_at, updated_at,
       launched_at, replay_of, trace, finished_at,
       CASE WHEN length(data::text) <= :value_chars THEN data END AS data_whole,
       CASE WHEN length(data::text) > :value_chars
            THEN substr(data::text, 1, :value_chars) END AS data_cut,
       CASE WHEN length(result::text) <= :value_chars THEN result END AS result_whole,
       CASE WHEN length(result::text) > :value_chars
            THEN substr(result::text, 1, :value_chars) END AS result_cut,
       CASE WHEN length(error::text) <= :value_chars THEN error END AS error_whole,
       CASE WHEN length(error::text) > :value_chars
            THEN substr(error::text, 1, :value_chars) END AS error_cut
FROM archived_jobs WHERE queue = :queue AND id = :id

-- name: jobs_by_keys
SELECT * FROM jobs WHERE correlation_key = ANY(:keys::text[])

-- name: job_attempts
-- A job's history: its rows of job_attempts, and the entry an archived row holds
-- itself (history_folded: a try that succeeded in its tick, schema version 11, or by
-- its target's answer, version 13). That entry is the job's last try: it sorts after
-- its attempt's rows, before the late responses recorded after it (the first of
-- which it takes the id of, ranked before it).
SELECT attempt, id, 1 AS rank, launched_at, finished_at, outcome, error, response
FROM job_attempts WHERE queue = :queue AND job_id = :job_id
UNION ALL
SELECT x.attempt, COALESCE((SELECT min(a.id) FROM job_attempts a
                 WHERE a.queue = x.queue AND a.job_id = x.id AND a.finished_at > x.finished_at),
                9223372036854775807), 0, x.launched_at,
       x.finished_at, 'succeeded', NULL,
       CASE WHEN x.history_source IS NOT NULL
            THEN jsonb_build_object('source', x.history_source) END
FROM archived_jobs x WHERE x.queue = :queue AND x.id = :job_id AND x.history_folded
ORDER BY attempt, id, rank

-- name: history_last
-- A job's last history entries, newest first, without the responses' bodies (the
-- archived row's own entry placed as in job_attempts). An error whose JSON text is
-- longer than :error_chars comes as {kind, detail, truncated: true}, its kind and
-- detail (a text error's text) cut (hipq/store/listing.py): never read whole.
SELECT attempt, id, 1 AS rank, launched_at, finished_at, outcome,
       CASE WHEN COALESCE(length(error::text), 0) <= :error_chars THEN error
            ELSE jsonb_build_object(
                'kind', COALESCE(left(error->>'kind', 100), 'response_failed'),
                'detail', left(CASE WHEN jsonb_typeof(error) = 'object' THEN error->>'detail'
                                    ELSE error #>> '{}' END, :error_chars),
                'truncated', true) END AS error
FROM job_attempts
WHERE queue = :queue AND job_id = :job_id
UNION ALL
SELECT x.attempt, COALESCE((SELECT min(a.id) FROM job_attempts a
                 WHERE a.queue = x.queue AND a.job_id = x.id AND a.finished_at > x.finished_at),
                9223372036854775807), 0, x.launched_at,
       x.finished_at, 'succeeded', NULL
FROM archived_jobs x WHERE x.queue = :queue AND x.id = :job_id AND x.history_folded
ORDER BY attempt DESC, id DESC, rank DESC LIMIT :limit

-- name: history_count
SELECT (SELECT count(*) FROM job_attempts WHERE queue = :queue AND job_id = :job_id)
     + (SELECT count(*) FROM archived_jobs
        WHERE queue = :queue AND id = :job_id AND history_folded)

-- name: archived_page
-- Archived jobs, newest first by (finished_at, queue, id), after a page's last key.
SELECT * FROM archived_jobs
WHERE (finished_at, queue, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                                  COALESCE(:after_queue::text, ''), COALESCE(:after_id::text, ''))
ORDER BY finished_at DESC, queue DESC, id DESC LIMIT :limit

-- name: archived_page_queue
-- "finished_at IS NOT NULL" (every row's) is ix_archived_jobs_queue_finished's
-- predicate (schema version 14): stated, the index serves the page.
SELECT * FROM archived_jobs
WHERE queue = :queue AND finished_at IS NOT NULL
  AND (finished_at, queue, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                                  COALESCE(:after_queue::text, ''), COALESCE(:after_id::text, ''))
ORDER BY finished_at DESC, queue DESC, id DESC LIMIT :limit

-- name: archived_page_status
-- One status other than succeeded: the partial index of those, in page order.
SELECT * FROM archived_jobs
WHERE status = :status AND status <> 'succeeded'
  AND (finished_at, queue, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                                  COALESCE(:after_queue::text, ''), COALESCE(:after_id::text, ''))
ORDER BY status DESC, finished_at DESC, queue DESC, id DESC LIMIT :limit

-- name: archived_page_succeeded
-- Succeeded jobs (most of the archive): by finishing time, skipping the others.
SELECT * FROM archived_jobs
WHERE status = 'succeeded'
  AND (finished_at, queue, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                                  COALESCE(:after_queue::text, ''), COALESCE(:after_id::text, ''))
ORDER BY finished_at DESC, queue DESC, id DESC LIMIT :limit

-- name: archived_page_queue_status
SELECT * FROM archived_jobs
WHERE queue = :queue AND status = :status AND finished_at IS NOT NULL
  AND (finished_at, queue, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                                  COALESCE(:after_queue::text, ''), COALESCE(:after_id::text, ''))
ORDER BY finished_at DESC, queue DESC, id DESC LIMIT :limit

-- name: live_running_page
-- A queue's running jobs by launch time, after a page's last key.
SELECT * FROM jobs
WHERE queue = :queue AND status = 'running'
  AND (launched_at, id) > (COALESCE(:after_at::timestamptz, '-infinity'),
                           COALESCE(:after_id::text, ''))
ORDER BY launched_at, id LIMIT :limit

-- name: live_queued_time_page
-- A queue's queued jobs in (run_at, priority, id) order, after a page's last key.
SELECT * FROM jobs
WHERE queue = :queue AND status = 'queued'
  AND (run_at, priority, id) > (COALESCE(:after_at::timestamptz, '-infinity'),
                                COALESCE(:after_priority::int4, -2147483648),
                                COALESCE(:after_id::text, ''))
ORDER BY run_at, priority, id LIMIT :limit

-- name: live_queued_priority_page
-- A queue's queued jobs in (priority, run_at, id) order, after a page's last key.
SELECT * FROM jobs
WHERE queue = :queue AND status = 'queued'
  AND (priority, run_at, id) > (COALESCE(:after_priority::int4, -2147483648),
                                COALESCE(:after_at::timestamptz, '-infinity'),
                                COALESCE(:after_id::text, ''))
ORDER BY priority, run_at, id LIMIT :limit

-- name: running_page
-- A queue's running jobs by id, after an id ('' precedes every id): an adoption's page.
SELECT * FROM jobs
WHERE queue = :queue AND status = 'running' AND id > COALESCE(:after_id::text, '')
ORDER BY id LIMIT :limit

-- name: running_by_ids
SELECT * FROM jobs
WHERE queue = :queue AND status = 'running' AND id = ANY(:ids::text[])
  AND id > COALESCE(:after_id::text, '')
ORDER BY id LIMIT :limit

-- -- the reconcile loop --------------------------------------------------------------
-- Step 1, the due jobs of a queue: queued, run_at passed, in the queue's order, read
-- from the partial index of that order (ix_jobs_due_time, ix_jobs_due_priority,
-- ix_jobs_due_critical; ix_jobs_due_group_* for one quota group) and stopped at the
-- limit. Without a group, the jobs of the quota groups in :excluding are left out
-- (the default group's fetch; an empty array for a queue without quotas). A job with
-- an ordering key is due only if it heads its key: no job of the key runs and none
-- queued comes before it; with :relaxed, a queued one waiting for its retry does not
-- hold the later ones back.
-- A page starts after a key (:after_*, NULLs for the queue's first due job; see the
-- keyset pages above): the page after a page that ran within its tick
-- (hipq.engine.prefetch) starts after the last job it ran, with no :excluding (a
-- plain read: no quota group); due_head_* reads the ids of the queued ones up to
-- that job (they all ran, or the page is not used).

-- name: due_time
SELECT * FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.run_at <= :now::timestamptz
  AND (j.run_at, j.priority, j.id) > (COALESCE(:after_run_at::timestamptz, '-infinity'),
      COALESCE(:after_priority::int, -2147483648), COALESCE(:after_id::text, ''))
  AND (j.group_key IS NULL OR j.group_key <> ALL(:excluding::text[]))
  AND (j.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs k WHERE k.queue = j.queue AND k.ordering_key = j.ordering_key
      AND (k.status = 'running' OR (k.status = 'queued'
           AND (k.key_order_at, k.id) < (j.key_order_at, j.id)
           AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now)))))
ORDER BY j.run_at, j.priority, j.id LIMIT :limit

-- name: due_priority
SELECT * FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.run_at <= :now::timestamptz
  AND (j.priority, j.run_at, j.id) > (COALESCE(:after_priority::int, -2147483648),
      COALESCE(:after_run_at::timestamptz, '-infinity'), COALESCE(:after_id::text, ''))
  AND (j.group_key IS NULL OR j.group_key <> ALL(:excluding::text[]))
  AND (j.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs k WHERE k.queue = j.queue AND k.ordering_key = j.ordering_key
      AND (k.status = 'running' OR (k.status = 'queued'
           AND (k.key_order_at, k.id) < (j.key_order_at, j.id)
           AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now)))))
ORDER BY j.priority, j.run_at, j.id LIMIT :limit

-- name: due_head_priority
SELECT j.id FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.run_at <= :now::timestamptz
  AND (j.priority, j.run_at, j.id)
      <= (:after_priority::int, :after_run_at::timestamptz, :after_id::text)
ORDER BY j.priority, j.run_at, j.id LIMIT :limit

-- name: due_head_time
SELECT j.id FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.run_at <= :now::timestamptz
  AND (j.run_at, j.priority, j.id)
      <= (:after_run_at::timestamptz, :after_priority::int, :after_id::text)
ORDER BY j.run_at, j.priority, j.id LIMIT :limit

-- name: due_critical
SELECT * FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.critical = true
  AND j.run_at <= :now::timestamptz
  AND (j.group_key IS NULL OR j.group_key <> ALL(:excluding::text[]))
  AND (j.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs k WHERE k.queue = j.queue AND k.ordering_key = j.ordering_key
      AND (k.status = 'running' OR (k.status = 'queued'
           AND (k.key_order_at, k.id) < (j.key_order_at, j.id)
           AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now)))))
ORDER BY j.run_at, j.priority, j.id LIMIT :limit

-- name: due_group_time
SELECT * FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.group_key = :group
  AND j.run_at <= :now::timestamptz
  AND (j.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs k WHERE k.queue = j.queue AND k.ordering_key = j.ordering_key
      AND (k.status = 'running' OR (k.status = 'queued'
           AND (k.key_order_at, k.id) < (j.key_order_at, j.id)
           AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now)))))
ORDER BY j.run_at, j.priority, j.id LIMIT :limit

-- name: due_group_priority
SELECT * FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.group_key = :group
  AND j.run_at <= :now::timestamptz
  AND (j.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs k WHERE k.queue = j.queue AND k.ordering_key = j.ordering_key
      AND (k.status = 'running' OR (k.status = 'queued'
           AND (k.key_order_at, k.id) < (j.key_order_at, j.id)
           AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now)))))
ORDER BY j.priority, j.run_at, j.id LIMIT :limit

-- name: due_group_critical
SELECT * FROM jobs j
WHERE j.queue = :queue AND j.status = 'queued' AND j.critical = true
  AND j.group_key = :group AND j.run_at <= :now::timestamptz
  AND (j.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs k WHERE k.queue = j.queue AND k.ordering_key = j.ordering_key
      AND (k.status = 'running' OR (k.status = 'queued'
           AND (k.key_order_at, k.id) < (j.key_order_at, j.id)
           AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now)))))
ORDER BY j.run_at, j.priority, j.id LIMIT :limit

-- name: count_due
SELECT count(*) AS n FROM (
    SELECT 1 FROM jobs WHERE queue = :queue AND status = 'queued' AND run_at <= :now
    LIMIT :limit) AS due

-- name: claim
-- Step 4: lock the chosen rows that are still queued (skipping rows another
-- transaction holds), then mark them running. :heartbeat_seconds may be NULL.
WITH chosen AS (
    SELECT t.tid, b.* FROM (SELECT :queue::text AS queue, unnest(:ids::text[]) AS id) AS b
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        AND k.status <> 'running' LIMIT 1 FOR UPDATE OF k SKIP LOCKED) AS t)
UPDATE jobs t SET
    status = 'running', attempt = t.attempt + 1, launched_at = :now::timestamptz,
    deadline = :now::timestamptz + make_interval(secs => CASE
        WHEN :heartbeat_seconds::float8 IS NULL
          OR t.timeout_seconds < :heartbeat_seconds::float8 THEN t.timeout_seconds
        ELSE :heartbeat_seconds::float8 END),
    owner = :owner::text, launch_confirmed = false, updated_at = :now::timestamptz,
    correlation_key = CASE WHEN t.correlation_fixed THEN t.correlation_key
        ELSE '~' || t.token || '.' || (t.attempt + 1)::text END
FROM chosen WHERE t.ctid = chosen.tid AND t.ctid = ANY(ARRAY(SELECT tid FROM chosen))
RETURNING t.id, t.attempt, t.correlation_key, t.deadline

-- name: launch_events
-- The claimed launches that count against a queue's rate limit.
INSERT INTO launch_events (queue, group_key, launched_at)
SELECT :queue::text, g, :now::timestamptz FROM unnest(:group_keys::text[]) AS g

-- name: confirm
-- Launches that reached their target, guarded by attempt and owner.
WITH hit AS (
    SELECT t.tid, b.* FROM unnest(:queues::text[], :ids::text[], :attempts::int4[])
        AS b(queue, id, attempt)
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        AND k.attempt = b.attempt AND k.owner = :owner LIMIT 1) AS t)
UPDATE jobs t SET launch_confirmed = true
FROM hit WHERE t.ctid = hit.tid AND t.ctid = ANY(ARRAY(SELECT tid FROM hit))

-- name: launch_events_recent
-- A queue's launches after :since (older ones deleted, in the same statement).
WITH gone AS (DELETE FROM launch_events WHERE queue = :queue AND launched_at <= :since)
SELECT group_key, launched_at FROM launch_events WHERE queue = :queue AND launched_at > :since

-- name: launch_events_restamp
UPDATE launch_events SET launched_at = :at WHERE queue = :queue AND launched_at < :at

-- name: launch_events_replace
-- A handover: the queue's launches since :since replaced by these (the statement's
-- delete does not see its own inserts).
WITH gone AS (DELETE FROM launch_events WHERE queue = :queue AND launched_at >= :since)
INSERT INTO launch_events (queue, group_key, launched_at)
SELECT :queue::text, e.group_key, e.launched_at
FROM unnest(:group_keys::text[], :times::timestamptz[]) AS e(group_key, launched_at)

-- name: vacuum
-- No parallel workers (PostgreSQL 13+): the table is small and hot, and a worker's
-- start (a process, cold caches) cost more than the index pass it took over; in a
-- profile of the in-tick lifecycle these vacuums took 12.5% of PostgreSQL's CPU with
-- workers, 4.7% without.
VACUUM (SKIP_LOCKED, PARALLEL 0) jobs

-- -- step 3: persisting the batch ----------------------------------------------------

-- name: archive
-- Step 3, ending tries: delete the running rows (guarded by attempt and owner),
-- archive them with their end, record the try (in the archived row itself for a
-- plain success by the target's answer, see folded), mark the responses applied;
-- returns what applied. The ends come as one JSON array of arrays [queue, id, attempt,
-- status, result, error, outcome, response]: one encoding call for the batch, where
-- eight parameter arrays cost a driver check per element and a JSON encoding per
-- value (a JSON null in result, error or response is SQL NULL).
WITH c AS (
    SELECT e->>0 AS queue, e->>1 AS id, (e->>2)::int4 AS attempt,
           COALESCE(e->>3, 'failed') AS status, NULLIF(e->4, 'null') AS result,
           NULLIF(e->5, 'null') AS error, COALESCE(e->>6, 'unknown') AS outcome,
           NULLIF(e->7, 'null') AS response
    FROM jsonb_array_elements(:ends::jsonb) AS e),
hit AS (
    SELECT t.tid, b.* FROM c AS b
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        AND k.attempt = b.attempt AND k.owner = :owner LIMIT 1) AS t),
ended AS (
    DELETE FROM jobs j USING hit
    WHERE j.ctid = hit.tid AND j.ctid = ANY(ARRAY(SELECT tid FROM hit))
    RETURNING j.*, hit.status AS end_status, hit.result AS end_result,
              hit.error AS end_error, hit.outcome AS end_outcome,
              hit.response AS end_response,
              -- a plain success by the target's own answer, under a key hipq made for
              -- this try (no other try ever holds it): its history entry is the
              -- archived row (schema version 13), no job_attempts row
              COALESCE(hit.status = 'succeeded' AND hit.outcome = 'succeeded'
                       AND hit.error IS NULL AND NOT j.correlation_fixed
                       AND hit.response = jsonb_build_object('source', 'target'),
                       false) AS folded),
archived AS (
    INSERT INTO archived_jobs (
        queue, id, token, data, run_at, expires_at, priority, weight, critical,
        time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
        ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
        launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
        status, result, error, updated_at, finished_at, history_folded, history_source)
    SELECT queue, id, token, data, run_at, expires_at, priority, weight, critical,
           time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
           ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
           launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
           end_status, end_result, end_error, :now::timestamptz, :now::timestamptz, folded,
           CASE WHEN folded THEN 'target' END
    FROM ended e
    -- an id archived before, by an earlier job of the same id whose archive committed
    -- after this one was enqueued: this end is not recorded (as ON CONFLICT DO NOTHING
    -- did; no two transactions archive one id at once, the jobs row's lock orders them).
    -- OFFSET 0 keeps the probe a subplan run per row on the primary key: as a join, a
    -- young or fast-growing archive was hashed or rescanned whole at every statement.
    WHERE NOT EXISTS (SELECT 1 FROM archived_jobs a WHERE a.queue = e.queue AND a.id = e.id
                      OFFSET 0)),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, attempt, correlation_key, launched_at, :now::timestamptz, end_outcome,
           end_error, end_response FROM ended WHERE NOT folded),
marked AS (
    -- the rows to mark found once (an InitPlan: a primary-key probe a listed id, kept
    -- a probe by LIMIT 1; pending ones only), then fetched by their row addresses. A
    -- join here let the planner (which sees one row in ended) rescan every listed id
    -- per marked row; "id = ANY(ids) AND applied_at IS NULL" read every pending row
    -- through the pending rows' index and tested it against every listed id.
    UPDATE response_inbox r SET applied_at = :now::timestamptz, outcome = 'applied'
    WHERE r.ctid = ANY(ARRAY(
        SELECT t.tid FROM unnest(:inbox_ids::int8[], :inbox_queues::text[],
                                 :inbox_jobs::text[]) AS m(id, queue, job)
        JOIN ended a ON a.queue = m.queue AND a.id = m.job
        CROSS JOIN LATERAL (SELECT x.ctid AS tid, x.applied_at FROM response_inbox x
                            WHERE x.id = m.id LIMIT 1) AS t
        WHERE t.applied_at IS NULL)))
SELECT queue, id FROM ended

-- name: archive_ran
-- Step 4 and step 3 at once, for tries that ran within their tick (an in-process
-- target, see hipq/engine/inline.py): delete the rows that are still queued at the
-- attempt before the try (the try's attempt - 1), archive them as claimed and ended
-- in the same instant (attempt, launch time, deadline, owner and key as step 4's
-- claim would have set them), record the try; returns what applied. A plain success
-- (no error, no response) is recorded in the archived row itself (history_folded,
-- schema version 11): no job_attempts row. A row another
-- transaction changed or holds meanwhile (cancelled, merged into) is left alone.
-- The ends as in archive: [queue, id, attempt, status, result, error, outcome,
-- response].
WITH c AS (
    SELECT e->>0 AS queue, e->>1 AS id, (e->>2)::int4 AS attempt,
           COALESCE(e->>3, 'failed') AS status, NULLIF(e->4, 'null') AS result,
           NULLIF(e->5, 'null') AS error, COALESCE(e->>6, 'unknown') AS outcome,
           NULLIF(e->7, 'null') AS response
    FROM jsonb_array_elements(:ends::jsonb) AS e),
hit AS (
    SELECT t.tid, b.* FROM c AS b
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        -- "<> 'running'" (a live row is queued or running) and not "= 'queued'",
        -- which lets the planner probe a due index by its queue alone, per row
        AND k.status <> 'running' AND k.attempt = b.attempt - 1
        LIMIT 1 FOR UPDATE OF k SKIP LOCKED) AS t),
ended AS (
    DELETE FROM jobs j USING hit
    WHERE j.ctid = hit.tid AND j.ctid = ANY(ARRAY(SELECT tid FROM hit))
    RETURNING j.*, hit.attempt AS try, hit.status AS end_status,
              hit.result AS end_result, hit.error AS end_error,
              hit.outcome AS end_outcome, hit.response AS end_response,
              CASE WHEN j.correlation_fixed THEN j.correlation_key
                   ELSE '~' || j.token || '.' || hit.attempt::text END AS try_key,
              (hit.status = 'succeeded' AND hit.outcome = 'succeeded' AND hit.error IS NULL
               AND hit.response IS NULL) AS folded),
archived AS (
    INSERT INTO archived_jobs (
        queue, id, token, data, run_at, expires_at, priority, weight, critical,
        time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
        ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
        launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
        status, result, error, updated_at, finished_at, history_folded)
    SELECT queue, id, token, data, run_at, expires_at, priority, weight, critical,
           time_windows, timezone, timeout_seconds, try_key, correlation_fixed,
           ordering_key, key_order_at, group_key, try, max_attempts, created_at,
           :now::timestamptz,
           :now::timestamptz + make_interval(secs => CASE
               WHEN :heartbeat_seconds::float8 IS NULL
                 OR timeout_seconds < :heartbeat_seconds::float8 THEN timeout_seconds
               ELSE :heartbeat_seconds::float8 END),
           :owner::text, true, replay_of, body_hash, trace,
           end_status, end_result, end_error, :now::timestamptz, :now::timestamptz, folded
    FROM ended e
    -- an id archived before (see archive); a probe per row (OFFSET 0, see archive),
    -- not ON CONFLICT's speculative insertion (an extra WAL record a row: 7% of this
    -- statement)
    WHERE NOT EXISTS (SELECT 1 FROM archived_jobs a WHERE a.queue = e.queue AND a.id = e.id
                      OFFSET 0)),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, try, try_key, :now::timestamptz, :now::timestamptz, end_outcome,
           end_error, end_response FROM ended WHERE NOT folded)
SELECT queue, id FROM ended

-- name: requeue
-- Step 3, retries: back to queued with a new run_at (and data, if the strategy
-- changed it; NULL: unchanged), the try recorded under its correlation key, the
-- responses marked applied; returns what applied. A throttled try is given back
-- (back = 1: the attempt count returns to what it was) under a new token (NULL:
-- kept), so that its signed callback URL and key complete no later try.
WITH c AS (
    SELECT * FROM unnest(:queues::text[], :ids::text[], :attempts::int4[],
                         :run_ats::timestamptz[], :datas::text[], :errors::text[],
                         :outcomes::text[], :responses::text[], :keys::text[],
                         :backs::int4[], :tokens::text[])
        AS c(queue, id, attempt, run_at, data, error, outcome, response, key, back, token)),
hit AS (
    SELECT t.tid, b.* FROM c AS b
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        AND k.attempt = b.attempt AND k.owner = :owner LIMIT 1) AS t),
back AS (
    UPDATE jobs j SET status = 'queued', run_at = hit.run_at,
        data = COALESCE(hit.data::jsonb, j.data), error = hit.error::jsonb,
        updated_at = :now, owner = NULL, deadline = NULL, launch_confirmed = false,
        correlation_key = CASE WHEN j.correlation_fixed THEN j.correlation_key END,
        attempt = j.attempt - hit.back, token = COALESCE(hit.token, j.token)
    FROM hit WHERE j.ctid = hit.tid AND j.ctid = ANY(ARRAY(SELECT tid FROM hit))
    RETURNING j.queue, j.id, hit.attempt AS attempt, j.launched_at, hit.error, hit.outcome,
              hit.response, hit.key),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, attempt, key, launched_at, :now, outcome, error::jsonb,
           response::jsonb FROM back),
marked AS (
    -- as in archive: the rows to mark found once, then fetched by their addresses
    UPDATE response_inbox r SET applied_at = :now::timestamptz, outcome = 'applied'
    WHERE r.ctid = ANY(ARRAY(
        SELECT t.tid FROM unnest(:inbox_ids::int8[], :inbox_queues::text[],
                                 :inbox_jobs::text[]) AS m(id, queue, job)
        JOIN back a ON a.queue = m.queue AND a.id = m.job
        CROSS JOIN LATERAL (SELECT x.ctid AS tid, x.applied_at FROM response_inbox x
                            WHERE x.id = m.id LIMIT 1) AS t
        WHERE t.applied_at IS NULL)))
SELECT queue, id FROM back

-- name: extend
-- Heartbeats: push deadlines out, mark the responses applied; returns what applied.
WITH hit AS (
    SELECT t.tid, b.* FROM unnest(:queues::text[], :ids::text[], :attempts::int4[],
                                  :deadlines::timestamptz[]) AS b(queue, id, attempt, deadline)
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        AND k.attempt = b.attempt AND k.owner = :owner LIMIT 1) AS t),
pushed AS (
    UPDATE jobs j SET deadline = hit.deadline, updated_at = :now
    FROM hit WHERE j.ctid = hit.tid AND j.ctid = ANY(ARRAY(SELECT tid FROM hit))
    RETURNING j.queue, j.id),
marked AS (
    -- as in archive: the rows to mark found once, then fetched by their addresses
    UPDATE response_inbox r SET applied_at = :now::timestamptz, outcome = 'applied'
    WHERE r.ctid = ANY(ARRAY(
        SELECT t.tid FROM unnest(:inbox_ids::int8[], :inbox_queues::text[],
                                 :inbox_jobs::text[]) AS m(id, queue, job)
        JOIN pushed a ON a.queue = m.queue AND a.id = m.job
        CROSS JOIN LATERAL (SELECT x.ctid AS tid, x.applied_at FROM response_inbox x
                            WHERE x.id = m.id LIMIT 1) AS t
        WHERE t.applied_at IS NULL)))
SELECT queue, id FROM pushed

-- -- queued jobs and adoption --------------------------------------------------------

-- name: adopt_running
UPDATE jobs SET owner = :owner, updated_at = :now WHERE queue = :queue AND status = 'running'

-- name: reschedule
-- Queued jobs to a new run_at (found through the primary key; jobs no longer
-- queued are left alone).
UPDATE jobs j SET run_at = u.run_at, updated_at = :now
FROM unnest(:ids::text[], :run_ats::timestamptz[]) AS u(id, run_at)
WHERE j.queue = :queue AND j.id = ANY(:ids) AND j.id = u.id AND j.status = 'queued'

-- name: archive_queued
-- End queued jobs without a launch: delete them (only if still queued), archive
-- them with their status and error; returns the rows deleted (as they were).
WITH e AS (
    SELECT * FROM unnest(:ids::text[], :statuses::text[], :errors::text[])
        AS e(id, status, error)),
gone AS (
    DELETE FROM jobs j USING e
    WHERE j.queue = :queue AND j.id = ANY(:ids) AND j.id = e.id AND j.status = 'queued'
    RETURNING j.*, e.status AS end_status, e.error AS end_error),
archived AS (
    INSERT INTO archived_jobs (
        queue, id, token, data, run_at, expires_at, priority, weight, critical,
        time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
        ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
        launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
        status, result, error, updated_at, finished_at)
    SELECT queue, id, token, data, run_at, expires_at, priority, weight, critical,
           time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
           ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
           launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
           end_status, result, end_error::jsonb, :now::timestamptz, :now::timestamptz
    FROM gone
    ON CONFLICT DO NOTHING)
SELECT * FROM gone

-- name: expired_any
-- Whether any queued job is past expires_at (the partial index of expiring jobs).
SELECT 1 FROM jobs
WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= :now
LIMIT 1

-- name: expire
-- Queued jobs past expires_at, earliest first, archived as expired; returns the
-- rows deleted (as they were).
WITH due AS (
    SELECT ctid AS tid FROM jobs
    WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= :now
    ORDER BY expires_at LIMIT :limit),
gone AS (
    DELETE FROM jobs j WHERE j.ctid = ANY(ARRAY(SELECT tid FROM due)) AND j.status = 'queued'
    RETURNING j.*),
archived AS (
    INSERT INTO archived_jobs (
        queue, id, token, data, run_at, expires_at, priority, weight, critical,
        time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
        ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
        launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
        status, result, error, updated_at, finished_at)
    SELECT queue, id, token, data, run_at, expires_at, priority, weight, critical,
           time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
           ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
           launched_at, deadline, owner, launch_confirmed, replay_of, body_hash, trace,
           'expired', result, :error::text::jsonb, :now::timestamptz, :now::timestamptz
    FROM gone
    ON CONFLICT DO NOTHING)
SELECT * FROM gone

-- -- the response inbox and late responses -------------------------------------------

-- name: inbox_insert
-- Responses received at :received_at, as one JSON array of arrays [correlation_key,
-- attempt, status, retryable, result, error, extend_seconds, source, dedup_key,
-- token] (one encoding call for the batch, as in archive; a JSON null in result or
-- error is SQL NULL). A repeated dedup_key (in the table or earlier in the batch)
-- is not inserted.
INSERT INTO response_inbox (correlation_key, attempt, status, retryable, result, error,
                            extend_seconds, source, dedup_key, received_at, token)
SELECT e->>0, (e->>1)::int4, e->>2, (e->>3)::bool, NULLIF(e->4, 'null'),
       NULLIF(e->5, 'null'), (e->>6)::float8, e->>7, e->>8,
       :received_at::timestamptz, e->>9
FROM jsonb_array_elements(:responses::jsonb) AS e
ON CONFLICT DO NOTHING RETURNING id, dedup_key

-- name: inbox_mark
-- Inbox rows of one outcome, by id: a primary-key probe an id (pending rows only),
-- then the rows fetched by their addresses, as step 3 marks (see archive). Joined to
-- the list of ids, the planner could rescan the list per row; "id = ANY(ids) AND
-- applied_at IS NULL" could read every pending row and test it against every id.
UPDATE response_inbox r SET applied_at = :now, outcome = :outcome
WHERE r.ctid = ANY(ARRAY(
    SELECT t.tid FROM unnest(:ids::int8[]) AS m(id)
    CROSS JOIN LATERAL (SELECT x.ctid AS tid, x.applied_at FROM response_inbox x
                        WHERE x.id = m.id LIMIT 1) AS t
    WHERE t.applied_at IS NULL))

-- name: inbox_pending_for_keys
-- Unapplied responses by correlation key (a partial index), oldest first.
SELECT * FROM response_inbox
WHERE correlation_key = ANY(:keys::text[]) AND applied_at IS NULL
ORDER BY id

-- name: inbox_pending_scan
-- Unapplied responses after an id, received before a time, by id (the pending rows'
-- partial index): step 0's cursor over new rows, and the sweep. At most :limit rows,
-- and none past the first that starts after :max_chars characters of result and
-- error JSON text: the page's ids and sizes are read first (page_rows: how many),
-- then only the rows within the bound are read whole, one primary-key probe a row
-- (LIMIT 1 keeps the lateral subquery a probe). Joined to the page instead, whose
-- rows the planner cannot count, they were read by a merge join that walked the
-- primary key from the inbox's first row, every applied row kept, at every read;
-- as "id = ANY(ARRAY(page ids))", by a sequential scan testing every row against
-- every id of the page.
WITH page AS MATERIALIZED (
    SELECT s.id, sum(s.chars) OVER (ORDER BY s.id) - s.chars AS chars_before,
           count(*) OVER () AS page_rows
    FROM (SELECT r.id, COALESCE(length(r.result::text), 0)
                       + COALESCE(length(r.error::text), 0) AS chars
          FROM response_inbox r
          WHERE r.applied_at IS NULL AND r.id > :after_id AND r.received_at < :before
          ORDER BY r.id LIMIT :limit) AS s)
SELECT r.*, p.page_rows FROM page p
CROSS JOIN LATERAL (SELECT * FROM response_inbox x WHERE x.id = p.id LIMIT 1) AS r
WHERE p.chars_before < :max_chars::int8
ORDER BY p.id

-- name: unmatched_page
-- Responses marked unmatched, newest first (a range scan of the partial index
-- ix_response_inbox_unmatched), after a page's last key. A result or error whose
-- JSON text is longer than :value_chars comes as that text cut (*_cut), else whole.
SELECT id, correlation_key, attempt, status, source, received_at, applied_at,
       CASE WHEN length(result::text) <= :value_chars THEN result END AS result_whole,
       CASE WHEN length(result::text) > :value_chars
            THEN substr(result::text, 1, :value_chars) END AS result_cut,
       CASE WHEN length(error::text) <= :value_chars THEN error END AS error_whole,
       CASE WHEN length(error::text) > :value_chars
            THEN substr(error::text, 1, :value_chars) END AS error_cut
FROM response_inbox
WHERE outcome = 'unmatched'
  AND (received_at, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                           COALESCE(:after_id::int8, 0))
ORDER BY received_at DESC, id DESC LIMIT :limit

-- name: inbox_counts
SELECT outcome, count(*) AS n FROM response_inbox GROUP BY outcome

-- name: attempt_keys
-- (queue, job id) of the latest past try of each correlation key: its row of
-- job_attempts, or the archived row that holds it (history_source, schema version
-- 13: a key hipq made for that one try, which no other try holds).
SELECT DISTINCT ON (correlation_key) correlation_key, queue, job_id FROM (
    SELECT correlation_key, queue, job_id, id FROM job_attempts
    WHERE correlation_key = ANY(:keys::text[])
    UNION ALL
    SELECT correlation_key, queue, id, 9223372036854775807 FROM archived_jobs
    WHERE correlation_key = ANY(:keys::text[]) AND history_source IS NOT NULL) AS t
ORDER BY correlation_key, id DESC

-- name: late_tries
-- The latest try of each correlation key (for late responses without an attempt;
-- the archived rows that hold their try as in attempt_keys).
SELECT correlation_key, max(attempt) AS attempt FROM (
    SELECT correlation_key, attempt FROM job_attempts
    WHERE correlation_key = ANY(:keys::text[])
    UNION ALL
    SELECT correlation_key, attempt FROM archived_jobs
    WHERE correlation_key = ANY(:keys::text[]) AND history_source IS NOT NULL) AS t
GROUP BY correlation_key

-- name: late_counts
-- How many late responses each try has recorded (the (queue, job_id, attempt) index).
SELECT a.queue, a.job_id, a.attempt, count(*) AS n FROM job_attempts a
WHERE (a.queue, a.job_id, a.attempt) IN (
          SELECT * FROM unnest(:queues::text[], :job_ids::text[], :attempts::int4[]))
  AND a.outcome = :outcome
GROUP BY a.queue, a.job_id, a.attempt

-- name: late_insert
INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                          finished_at, outcome, error, response)
SELECT u.queue, u.job_id, u.attempt, u.correlation_key, NULL, :now::timestamptz,
       :outcome::text, u.error::jsonb, u.response::jsonb
FROM unnest(:queues::text[], :job_ids::text[], :attempts::int4[], :keys::text[],
            :errors::text[], :responses::text[])
    AS u(queue, job_id, attempt, correlation_key, error, response)

-- -- leases and membership -----------------------------------------------------------

-- name: lease_acquire
-- Acquire or renew leases; another owner's only once expired; a renewal keeps
-- acquired_at. Returns the queues the owner holds now.
INSERT INTO leases (queue, owner, acquired_at, expires_at)
SELECT q, :owner::text, :now::timestamptz, :expires::timestamptz
FROM unnest(:queues::text[]) AS q
ON CONFLICT (queue) DO UPDATE SET
    owner = excluded.owner, expires_at = excluded.expires_at,
    acquired_at = CASE WHEN leases.owner = excluded.owner THEN leases.acquired_at
                       ELSE excluded.acquired_at END
WHERE leases.owner = excluded.owner OR leases.expires_at < :now
RETURNING queue

-- name: lease_release_all
DELETE FROM leases WHERE owner = :owner

-- name: lease_release
DELETE FROM leases WHERE owner = :owner AND queue = ANY(:queues::text[])

-- name: lease_list
SELECT queue, owner, expires_at FROM leases

-- name: daemon_heartbeat
-- Register the owner as live (started_at kept), forget daemons long gone, and list
-- the live ones: the statement's snapshot predates its own upsert, so the owner
-- comes from the upsert's RETURNING, the others from the table.
WITH beat AS (
    INSERT INTO daemons (owner, started_at, heartbeat_at, expires_at)
    VALUES (:owner, :now, :now, :expires)
    ON CONFLICT (owner) DO UPDATE SET heartbeat_at = excluded.heartbeat_at,
        expires_at = excluded.expires_at
    RETURNING owner),
forgotten AS (DELETE FROM daemons WHERE expires_at < :forget_before AND owner <> :owner)
SELECT owner FROM beat
UNION
SELECT owner FROM daemons WHERE expires_at >= :now AND owner <> :owner
ORDER BY owner

-- name: daemon_leave
DELETE FROM daemons WHERE owner = :owner

-- -- the intake: enqueue from SQL (docs/from-your-database.md) ------------------------
-- JSON columns are read as their text: ingestion validates the text of a batch in
-- one go, and a value nested too deeply for Python's decoder stays text (rejected).
-- Every read is bounded in bytes before a value is read (docs/from-your-database.md,
-- "Limits"): size, the bytes of a row's data and fields as JSON text, is measured by
-- PostgreSQL as the row is written (a generated column, schema version 15). A row
-- over :max_bytes comes without its data and fields, and a time out of
-- [:earliest, :latest) (what hipq reads; an owner may store 'infinity') as NULL;
-- "unreadable" names what could not be read, and the row is rejected on its own.

-- name: intake_pending
-- Each queue's rows read in its index order, at most :limit of each (a queue list
-- in one index condition would read every pending row and sort them); of the first
-- :limit in id order, those that start under :budget bytes (the rows read before
-- them), so a read holds at most :budget bytes and one row. The JSON is turned to
-- text for the rows kept only; a job id is read cut past what a valid one may hold.
SELECT r.id, r.queue, left(r.job_id, :id_chars) AS job_id, r.size, r.error, r.rejected_at,
       CASE WHEN r.size <= :max_bytes THEN r.data::text END AS data,
       CASE WHEN r.size <= :max_bytes THEN r.fields::text END AS fields,
       CASE WHEN r.run_after >= :earliest::timestamptz AND r.run_after < :latest::timestamptz
            THEN r.run_after END AS run_after,
       CASE WHEN r.enqueued_at >= :earliest AND r.enqueued_at < :latest
            THEN r.enqueued_at END AS enqueued_at,
       CASE WHEN r.size > :max_bytes THEN 'size'
            WHEN NOT (r.run_after >= :earliest AND r.run_after < :latest) THEN 'run_after'
            WHEN NOT (r.enqueued_at >= :earliest AND r.enqueued_at < :latest)
            THEN 'enqueued_at' END AS unreadable
FROM (
    SELECT i.*, sum(CASE WHEN i.size <= :max_bytes THEN i.size ELSE 0 END)
                    OVER (ORDER BY i.id) AS upto
    FROM (
        SELECT i.* FROM unnest(:queues::text[]) AS q(queue)
        CROSS JOIN LATERAL (
            SELECT * FROM job_intake j
            WHERE j.error IS NULL AND j.queue = q.queue AND j.id > :after
            ORDER BY j.id LIMIT :limit) AS i
        ORDER BY i.id LIMIT :limit) AS i) AS r
WHERE r.upto - CASE WHEN r.size <= :max_bytes THEN r.size ELSE 0 END < :budget::int8
ORDER BY r.id

-- name: intake_orphans
-- Pending rows of queues not in :known: the distinct queues of the pending index
-- found by skipping through it (one probe per queue, not one per row), then the
-- old rows of each unknown one; no value is read (they are rejected as such), and the
-- queue name and job id are read cut past what a valid one may hold.
WITH RECURSIVE queues AS (
    (SELECT queue FROM job_intake WHERE error IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM job_intake j WHERE j.error IS NULL AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM queues q WHERE q.queue IS NOT NULL)
SELECT i.id, left(i.queue, :queue_chars) AS queue, left(i.job_id, :id_chars) AS job_id,
       i.size, NULL::text AS data, NULL::timestamptz AS run_after,
       NULL::text AS fields, NULL::timestamptz AS enqueued_at, i.error, i.rejected_at,
       NULL::text AS unreadable
FROM queues q
CROSS JOIN LATERAL (
    SELECT * FROM job_intake j
    WHERE j.error IS NULL AND j.queue = q.queue AND j.enqueued_at < :before
    ORDER BY j.id LIMIT :limit) AS i
WHERE q.queue IS NOT NULL AND NOT (q.queue = ANY(:known::text[]))
ORDER BY i.id LIMIT :limit

-- name: intake_done
-- Ingested rows go, rejected ones keep their error; only rows still pending.
WITH gone AS (DELETE FROM job_intake WHERE id = ANY(:ingested::int8[]) AND error IS NULL)
UPDATE job_intake i SET error = r.error, rejected_at = :now
FROM unnest(:rejected_ids::int8[], :errors::text[]) AS r(id, error)
WHERE i.id = r.id AND i.error IS NULL

-- name: intake_find
-- The oldest pending row that will make this job, read as intake_pending reads it
-- with the limit the daemons stored (:limit_key of hipq_meta, else :default_bytes).
SELECT j.id, j.queue, j.job_id, j.size, l.max_bytes, j.error, j.rejected_at,
       CASE WHEN j.size <= l.max_bytes THEN j.data::text END AS data,
       CASE WHEN j.size <= l.max_bytes THEN j.fields::text END AS fields,
       CASE WHEN j.run_after >= :earliest::timestamptz AND j.run_after < :latest::timestamptz
            THEN j.run_after END AS run_after,
       CASE WHEN j.enqueued_at >= :earliest AND j.enqueued_at < :latest
            THEN j.enqueued_at END AS enqueued_at,
       CASE WHEN j.size > l.max_bytes THEN 'size'
            WHEN NOT (j.run_after >= :earliest AND j.run_after < :latest) THEN 'run_after'
            WHEN NOT (j.enqueued_at >= :earliest AND j.enqueued_at < :latest)
            THEN 'enqueued_at' END AS unreadable
FROM (SELECT COALESCE((SELECT value::int8 FROM hipq_meta WHERE key = :limit_key),
                      :default_bytes::int8) AS max_bytes) AS l
CROSS JOIN LATERAL (
    SELECT * FROM job_intake
    WHERE queue = :queue AND job_id = :job_id AND error IS NULL
    ORDER BY id LIMIT 1) AS j

-- name: intake_rejected_page
-- Rejected rows, newest first, after a page's last key: only rows rejected at a time
-- hipq reads (hipq writes it; others wait for intake_prune). A string, or a value's
-- JSON text, longer than :value_chars comes cut there (<name>_cut); a value whose row
-- is no larger than that in bytes is whole without being measured.
SELECT id, left(queue, :value_chars) AS queue, length(queue) > :value_chars AS queue_cut,
       left(job_id, :value_chars) AS job_id, length(job_id) > :value_chars AS id_cut,
       CASE WHEN size <= :value_chars THEN data::text
            ELSE left(data::text, :value_chars) END AS data,
       size > :value_chars AND length(data::text) > :value_chars AS data_cut,
       CASE WHEN size <= :value_chars THEN fields::text
            ELSE left(fields::text, :value_chars) END AS fields,
       size > :value_chars AND length(fields::text) > :value_chars AS fields_cut,
       left(error, :value_chars) AS error, length(error) > :value_chars AS error_cut,
       CASE WHEN run_after >= :earliest::timestamptz AND run_after < :latest::timestamptz
            THEN run_after END AS run_after,
       CASE WHEN enqueued_at >= :earliest AND enqueued_at < :latest
            THEN enqueued_at END AS enqueued_at,
       rejected_at, size
FROM job_intake
WHERE error IS NOT NULL AND (:queue::text IS NULL OR queue = :queue)
  AND rejected_at >= :earliest AND rejected_at < :latest
  AND (rejected_at, id) < (COALESCE(:after_at::timestamptz, 'infinity'),
                           COALESCE(:after_id::int8, 9223372036854775807))
ORDER BY rejected_at DESC, id DESC LIMIT :limit

-- name: intake_prune
-- At most :limit rejected rows, oldest first: those rejected before :before, and
-- those carrying a rejection time hipq never writes (none, or one past :ahead, such
-- as 'infinity': written by a table's owner), so no row is kept for ever.
DELETE FROM job_intake WHERE id = ANY(ARRAY(
    SELECT id FROM job_intake
    WHERE error IS NOT NULL
      AND (rejected_at < :before OR rejected_at > :ahead OR rejected_at IS NULL)
    ORDER BY rejected_at, id LIMIT :limit))

-- name: intake_counts
-- Per queue name (cut to 100 characters), its pending and rejected rows: every queue
-- that exists, the first :others other names, the rest summed under :other, so the
-- answer is bounded whatever names producers wrote.
WITH per AS (
    SELECT left(queue, 100) AS queue, count(*) FILTER (WHERE error IS NULL) AS pending,
           count(*) FILTER (WHERE error IS NOT NULL) AS rejected
    FROM job_intake GROUP BY 1),
numbered AS (
    SELECT per.*, k.known,
           row_number() OVER (PARTITION BY k.known ORDER BY per.queue) AS n
    FROM per CROSS JOIN LATERAL (
        SELECT EXISTS (SELECT 1 FROM queues q WHERE q.id = per.queue) AS known) AS k)
SELECT queue, pending, rejected FROM numbered WHERE known OR n <= :others
UNION ALL
SELECT :other::text, sum(pending), sum(rejected) FROM numbered
WHERE NOT known AND n > :others HAVING count(*) > 0

-- name: intake_last_id
SELECT COALESCE(max(id), 0) AS id FROM job_intake

-- -- the partner's word (docs/throttling.md) ------------------------------------------

-- name: backoff_list
-- A scope is "" (the queue) or "=" and its group, at most 200 characters
-- (hipq/pause_scope.py); a longer one, stored whole by an earlier version, is read
-- cut to its first 128 characters and "…" (it matches no job's group).
SELECT queue, CASE WHEN length(scope) <= 201 THEN scope
                   ELSE substr(scope, 1, 129) || '…' END AS scope,
       until, reason, streak, since FROM queue_backoffs
WHERE queue = ANY(:queues::text[]) ORDER BY queue, 2

-- name: backoff_all
-- Scopes read as backoff_list reads them.
SELECT queue, CASE WHEN length(scope) <= 201 THEN scope
                   ELSE substr(scope, 1, 129) || '…' END AS scope,
       until, reason, streak, since FROM queue_backoffs ORDER BY queue, 2

-- name: backoff_replace
-- The owner's pauses of one queue, all of them: the rows not given are deleted.
WITH gone AS (DELETE FROM queue_backoffs WHERE queue = :queue
              AND NOT (scope = ANY(:scopes::text[])))
INSERT INTO queue_backoffs (queue, scope, until, reason, streak, since)
SELECT :queue::text, u.scope, u.until, u.reason, u.streak, u.since
FROM unnest(:scopes::text[], :untils::timestamptz[], :reasons::text[], :streaks::int4[],
            :sinces::timestamptz[]) AS u(scope, until, reason, streak, since)
ON CONFLICT (queue, scope) DO UPDATE SET until = excluded.until, reason = excluded.reason,
    streak = excluded.streak, since = excluded.since

-- name: backoff_clear
DELETE FROM queue_backoffs WHERE queue = :queue

-- name: backoff_clear_due
-- A resume: every pause of the queue ends, and, in the same statement, its queued
-- jobs given back by the partner's "not now" (their last error: kind 'throttled',
-- with 'in_a_row' and data.from_partner true, as hipq.engine.decide.change_for
-- requeues them) and due later than :now are due at :now. Jobs waiting for a
-- run_after, a retry's back-off or a producer's throttled status are left alone.
-- The queue's future jobs are read through ix_jobs_due_time (a resume is rare).
WITH gone AS (DELETE FROM queue_backoffs WHERE queue = :queue RETURNING 1),
due AS (
    UPDATE jobs SET run_at = :now, updated_at = :now
    WHERE queue = :queue AND status = 'queued' AND run_at > :now
      AND error->>'kind' = 'throttled' AND error->'in_a_row' IS NOT NULL
      AND error->'data'->'from_partner' = 'true'::jsonb
    RETURNING 1)
SELECT (SELECT count(*) FROM gone) AS cleared, (SELECT count(*) FROM due) AS due

-- name: queue_state_list
SELECT queue, effective, successes, decreased_at, held::text AS held, held_at,
       throttled_total, learned_rate, learned_since, budget::text AS budget
FROM queue_state WHERE queue = ANY(:queues::text[])

-- name: queue_state_all
SELECT queue, effective, successes, decreased_at, held::text AS held, held_at,
       throttled_total, learned_rate, learned_since, budget::text AS budget
FROM queue_state

-- name: queue_state_save
INSERT INTO queue_state (queue, effective, successes, decreased_at, held, held_at,
                         throttled_total, learned_rate, learned_since, budget)
SELECT u.queue, u.effective, u.successes, u.decreased_at, u.held::jsonb, u.held_at,
       u.throttled_total, u.learned_rate, u.learned_since, u.budget::jsonb
FROM unnest(:queues::text[], :effectives::float8[], :successes::int4[],
            :decreased_ats::timestamptz[], :helds::text[], :held_ats::timestamptz[],
            :totals::int8[], :learned_rates::float8[], :learned_sinces::timestamptz[],
            :budgets::text[])
    AS u(queue, effective, successes, decreased_at, held, held_at, throttled_total,
         learned_rate, learned_since, budget)
ON CONFLICT (queue) DO UPDATE SET effective = excluded.effective,
    successes = excluded.successes, decreased_at = excluded.decreased_at,
    held = excluded.held, held_at = excluded.held_at,
    throttled_total = excluded.throttled_total, learned_rate = excluded.learned_rate,
    learned_since = excluded.learned_since, budget = excluded.budget

-- -- why a job waits (docs/throttling.md) ---------------------------------------------
-- Where a queued job stands in its queue, in one read, when one job is asked for
-- (hipq/waiting.py), never by a tick: the weight of the running jobs by (critical,
-- quota group), as JSON (the running jobs' partial index, ix_jobs_running); the first
-- job of its ordering key that holds it back, as in due_time (the key's index,
-- ix_jobs_ordering_key, in order, stopped at the first; none without a key); and how
-- many due queued jobs come before it, counted up to :limit (the queue's order index,
-- ix_jobs_due_time or ix_jobs_due_priority, read in its order: the ORDER BY lets the
-- scan stop at the limit, where a bitmap scan would read the whole range first).

-- name: standing_time
SELECT
    (SELECT COALESCE(json_agg(json_build_array(r.critical, r.group_key, r.weight)), '[]')
     FROM (SELECT critical, group_key, sum(weight) AS weight FROM jobs
           WHERE queue = :queue AND status = 'running'
           GROUP BY critical, group_key) AS r)::text AS running,
    (SELECT k.id FROM jobs k
     WHERE k.queue = :queue AND k.ordering_key = :ordering_key::text AND k.id <> :id::text
       AND (k.status = 'running' OR (k.status = 'queued'
            AND (k.key_order_at, k.id) < (:key_order_at::timestamptz, :id)
            AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now::timestamptz)))
     ORDER BY k.key_order_at, k.id LIMIT 1) AS key_ahead,
    (SELECT count(*) FROM (
        SELECT 1 FROM jobs
        WHERE queue = :queue AND status = 'queued' AND run_at <= :now
          AND (run_at, priority, id) < (:run_at::timestamptz, :priority::int4, :id)
        ORDER BY run_at, priority, id LIMIT :limit) AS a) AS ahead

-- name: standing_priority
-- The same in (priority, run_at, id) order.
SELECT
    (SELECT COALESCE(json_agg(json_build_array(r.critical, r.group_key, r.weight)), '[]')
     FROM (SELECT critical, group_key, sum(weight) AS weight FROM jobs
           WHERE queue = :queue AND status = 'running'
           GROUP BY critical, group_key) AS r)::text AS running,
    (SELECT k.id FROM jobs k
     WHERE k.queue = :queue AND k.ordering_key = :ordering_key::text AND k.id <> :id::text
       AND (k.status = 'running' OR (k.status = 'queued'
            AND (k.key_order_at, k.id) < (:key_order_at::timestamptz, :id)
            AND NOT (:relaxed::bool AND k.attempt > 0 AND k.run_at > :now::timestamptz)))
     ORDER BY k.key_order_at, k.id LIMIT 1) AS key_ahead,
    (SELECT count(*) FROM (
        SELECT 1 FROM jobs
        WHERE queue = :queue AND status = 'queued' AND run_at <= :now
          AND (priority, run_at, id) < (:priority::int4, :run_at::timestamptz, :id)
        ORDER BY priority, run_at, id LIMIT :limit) AS a) AS ahead

-- -- stats and housekeeping ----------------------------------------------------------

-- name: queue_counts
SELECT queue,
       count(*) FILTER (WHERE status = 'queued') AS queued,
       count(*) FILTER (WHERE status = 'queued' AND run_at <= :now) AS due,
       count(*) FILTER (WHERE status = 'running') AS running,
       COALESCE(sum(weight) FILTER (WHERE status = 'running'), 0) AS running_weight,
       min(run_at) FILTER (WHERE status = 'queued' AND run_at <= :now) AS oldest_due
FROM jobs GROUP BY queue

-- name: prune
-- The oldest archived jobs finished before :before with their tries, and the oldest
-- inbox rows applied before it, at most :limit of each; returns how many of each.
WITH old AS (
    SELECT queue, id FROM archived_jobs WHERE finished_at < :before
    ORDER BY finished_at LIMIT :limit),
tries AS (
    DELETE FROM job_attempts a USING old o WHERE a.queue = o.queue AND a.job_id = o.id),
archived AS (
    DELETE FROM archived_jobs t USING old o WHERE t.queue = o.queue AND t.id = o.id),
inbox AS (
    DELETE FROM response_inbox WHERE id = ANY(ARRAY(
        SELECT id FROM response_inbox WHERE applied_at < :before
        ORDER BY applied_at LIMIT :limit))
    RETURNING 1)
SELECT (SELECT count(*) FROM old) AS jobs, (SELECT count(*) FROM inbox) AS responses

-- -- what the owner sees of a partner (docs/http-api.md, "Partners") ----------------------

-- name: partner_seen_save
-- The owner's word on its partners in one statement: each snapshot replaces its
-- partner's row; each minute is added to its partner's row of that minute (counts
-- summed, in_flight_max the larger, learned rate and buckets replaced); the rows of
-- those partners older than :before go (the main statement sees the table as it was
-- before the inserts: the current minutes are never older than :before).
WITH seen AS (
    INSERT INTO partner_state (partner, snapshot, updated_at, owner)
    SELECT u.partner, u.snapshot::jsonb, u.updated_at, u.owner
    FROM unnest(:partners::text[], :snapshots::text[], :updated_ats::timestamptz[],
                :owners::text[]) AS u(partner, snapshot, updated_at, owner)
    ON CONFLICT (partner) DO UPDATE SET snapshot = excluded.snapshot,
        updated_at = excluded.updated_at, owner = excluded.owner
    RETURNING 1),
added AS (
    INSERT INTO partner_minutes (partner, minute, accepted, refused, in_flight_max,
                                 learned_rate, buckets)
    SELECT u.partner, u.minute, u.accepted, u.refused, u.in_flight_max, u.learned_rate,
           u.buckets::jsonb
    FROM unnest(:minute_partners::text[], :minutes::timestamptz[], :accepted::int8[],
                :refused::int8[], :in_flight_maxes::int8[], :learned_rates::float8[],
                :buckets::text[])
        AS u(partner, minute, accepted, refused, in_flight_max, learned_rate, buckets)
    ON CONFLICT (partner, minute) DO UPDATE SET
        accepted = partner_minutes.accepted + excluded.accepted,
        refused = partner_minutes.refused + excluded.refused,
        in_flight_max = GREATEST(partner_minutes.in_flight_max, excluded.in_flight_max),
        learned_rate = excluded.learned_rate, buckets = excluded.buckets
    RETURNING 1)
DELETE FROM partner_minutes
WHERE partner = ANY(:minute_partners::text[]) AND minute < :before

-- name: partner_seen_list
SELECT partner, snapshot::text AS snapshot, updated_at, owner FROM partner_state
WHERE partner = ANY(:partners::text[]) ORDER BY partner

-- name: partner_seen_all
SELECT partner, snapshot::text AS snapshot, updated_at, owner FROM partner_state
ORDER BY partner

-- name: partner_minutes_list
-- One partner's minutes from :since on: a range of the primary key.
SELECT partner, minute, accepted, refused, in_flight_max, learned_rate,
       buckets::text AS buckets
FROM partner_minutes WHERE partner = :partner AND minute >= :since ORDER BY minute
