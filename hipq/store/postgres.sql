-- The PostgreSQL driver's hand-written statements (hipq/store/postgres.py), loaded
-- once at import by hipq/store/pgsql.py: a block runs from its "-- name: NAME"
-- line to the next one; comment lines are dropped; ":param" placeholders become
-- asyncpg's $1, $2... in order of first appearance ("::type" casts are left alone).
--
-- How these statements reach rows of jobs, and why:
-- * A batch travels as one array per column (unnest), or as one JSON array, so each
--   statement text is fixed and asyncpg prepares it once per connection.
-- * Rows of jobs are found one batch row at a time through the primary key, in a
--   LATERAL subquery with LIMIT 1, which the planner never flattens into a join: no
--   estimate (a table without statistics, or statistics saying no job has an owner,
--   which made "owner = :owner" look like one row) can turn it into a scan of the
--   backlog per batch row. The subquery returns the row's ctid.
-- * The statement then joins jobs on that ctid alone, twice: "j.ctid = hit.tid"
--   and "j.ctid = ANY(ARRAY(SELECT tid FROM hit))". The join condition alone let
--   the planner hash the whole table once a batch was large; the = ANY gives it a
--   TID scan of just those rows. A row changed since by another transaction has a
--   new ctid and is left alone.
-- * The hot table holds only 'queued' and 'running' rows, and a job has an owner
--   only while running, so "owner = :owner" with the attempt says "running, ours,
--   this try", and "status <> 'running'" says "queued".
-- * JSON values travel as text and are cast to jsonb here.

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

-- name: archive
-- Step 3, ending tries: delete the running rows (guarded by attempt and owner),
-- archive them with their end, record the try, mark the responses applied; returns
-- what applied. The ends come as one JSON array of arrays [queue, id, attempt,
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
              hit.response AS end_response),
archived AS (
    INSERT INTO archived_jobs (
        queue, id, token, data, run_at, expires_at, priority, weight, critical,
        time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
        ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
        launched_at, deadline, owner, launch_confirmed, replay_of, body_hash,
        status, result, error, updated_at, finished_at)
    SELECT queue, id, token, data, run_at, expires_at, priority, weight, critical,
           time_windows, timezone, timeout_seconds, correlation_key, correlation_fixed,
           ordering_key, key_order_at, group_key, attempt, max_attempts, created_at,
           launched_at, deadline, owner, launch_confirmed, replay_of, body_hash,
           end_status, end_result, end_error, :now::timestamptz, :now::timestamptz
    FROM ended
    ON CONFLICT DO NOTHING),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, attempt, correlation_key, launched_at, :now::timestamptz, end_outcome,
           end_error, end_response FROM ended),
marked AS (
    -- the ids to mark computed once (an InitPlan), then one index scan over them: a
    -- join here let the planner (which sees one row in ended) rescan every listed id
    -- per marked row, quadratic in the responses of a tick
    UPDATE response_inbox r SET applied_at = :now::timestamptz, outcome = 'applied'
    WHERE r.id = ANY(ARRAY(
        SELECT m.id FROM unnest(:inbox_ids::int8[], :inbox_queues::text[],
                                :inbox_jobs::text[]) AS m(id, queue, job)
        JOIN ended a ON a.queue = m.queue AND a.id = m.job))
      AND r.applied_at IS NULL)
SELECT queue, id FROM ended

-- name: requeue
-- Step 3, retries: back to queued with a new run_at (and data, if the strategy
-- changed it; NULL: unchanged), the try recorded under its correlation key, the
-- responses marked applied; returns what applied.
WITH c AS (
    SELECT * FROM unnest(:queues::text[], :ids::text[], :attempts::int4[],
                         :run_ats::timestamptz[], :datas::text[], :errors::text[],
                         :outcomes::text[], :responses::text[], :keys::text[])
        AS c(queue, id, attempt, run_at, data, error, outcome, response, key)),
hit AS (
    SELECT t.tid, b.* FROM c AS b
    CROSS JOIN LATERAL (
        SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id
        AND k.attempt = b.attempt AND k.owner = :owner LIMIT 1) AS t),
back AS (
    UPDATE jobs j SET status = 'queued', run_at = hit.run_at,
        data = COALESCE(hit.data::jsonb, j.data), error = hit.error::jsonb,
        updated_at = :now, owner = NULL, deadline = NULL, launch_confirmed = false,
        correlation_key = CASE WHEN j.correlation_fixed THEN j.correlation_key END
    FROM hit WHERE j.ctid = hit.tid AND j.ctid = ANY(ARRAY(SELECT tid FROM hit))
    RETURNING j.queue, j.id, j.attempt, j.launched_at, hit.error, hit.outcome, hit.response,
              hit.key),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, attempt, key, launched_at, :now, outcome, error::jsonb,
           response::jsonb FROM back),
marked AS (
    -- the ids to mark computed once (an InitPlan), then one index scan over them: a
    -- join here let the planner (which sees one row in back) rescan every listed id
    -- per marked row, quadratic in the responses of a tick
    UPDATE response_inbox r SET applied_at = :now::timestamptz, outcome = 'applied'
    WHERE r.id = ANY(ARRAY(
        SELECT m.id FROM unnest(:inbox_ids::int8[], :inbox_queues::text[],
                                :inbox_jobs::text[]) AS m(id, queue, job)
        JOIN back a ON a.queue = m.queue AND a.id = m.job))
      AND r.applied_at IS NULL)
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
    -- the ids to mark computed once (an InitPlan), then one index scan over them: a
    -- join here let the planner (which sees one row in pushed) rescan every listed id
    -- per marked row, quadratic in the responses of a tick
    UPDATE response_inbox r SET applied_at = :now::timestamptz, outcome = 'applied'
    WHERE r.id = ANY(ARRAY(
        SELECT m.id FROM unnest(:inbox_ids::int8[], :inbox_queues::text[],
                                :inbox_jobs::text[]) AS m(id, queue, job)
        JOIN pushed a ON a.queue = m.queue AND a.id = m.job))
      AND r.applied_at IS NULL)
SELECT queue, id FROM pushed

-- name: inbox_insert
-- Responses, one array per column; a repeated dedup_key (in the table or earlier
-- in the batch) is not inserted.
INSERT INTO response_inbox (correlation_key, attempt, status, retryable, result, error,
                            extend_seconds, source, dedup_key, received_at, token)
SELECT u.correlation_key, u.attempt, u.status, u.retryable, u.result::jsonb,
       u.error::jsonb, u.extend_seconds, u.source, u.dedup_key, u.received_at, u.token
FROM unnest(:correlation_keys::text[], :attempts::int4[], :statuses::text[],
            :retryables::bool[], :results::text[], :errors::text[],
            :extend_seconds::float8[], :sources::text[], :dedup_keys::text[],
            :received_ats::timestamptz[], :tokens::text[])
    AS u(correlation_key, attempt, status, retryable, result, error, extend_seconds,
         source, dedup_key, received_at, token)
ON CONFLICT DO NOTHING RETURNING id, dedup_key

-- name: inbox_mark
-- Inbox rows of one outcome, by id (the primary key): one index scan over the ids
-- and no join (joined to the list of ids, the planner could rescan the list per row).
UPDATE response_inbox SET applied_at = :now, outcome = :outcome
WHERE id = ANY(:ids::int8[]) AND applied_at IS NULL

-- name: inbox_pending_for_keys
-- Unapplied responses by correlation key (a partial index), oldest first.
SELECT * FROM response_inbox
WHERE correlation_key = ANY(:keys::text[]) AND applied_at IS NULL
ORDER BY id

-- name: inbox_pending_scan
-- Unapplied responses after an id, received before a time, by id (the pending rows'
-- partial index): step 0's cursor over new rows, and the sweep.
SELECT * FROM response_inbox
WHERE applied_at IS NULL AND id > :after_id AND received_at < :before
ORDER BY id LIMIT :limit

-- name: expired_any
-- Whether any queued job is past expires_at (the partial index of expiring jobs).
SELECT 1 FROM jobs
WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= :now
LIMIT 1

-- name: jobs_by_keys
SELECT * FROM jobs WHERE correlation_key = ANY(:keys::text[])

-- name: live_by_ids
SELECT * FROM jobs WHERE queue = :queue AND id = ANY(:ids::text[])

-- name: archived_by_ids
SELECT * FROM archived_jobs WHERE queue = :queue AND id = ANY(:ids::text[])

-- name: queues
SELECT * FROM queues ORDER BY id

-- name: vacuum
VACUUM (SKIP_LOCKED) jobs
