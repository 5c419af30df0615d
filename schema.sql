-- hipq schema version 17. Generated from hipq/store/schema.py
-- (python -m hipq.store.schema > schema.sql); hipq migrate creates the same
-- from hipq/store/migrations/postgresql/.

CREATE TABLE archived_jobs (
	queue TEXT NOT NULL, 
	id TEXT NOT NULL, 
	token TEXT NOT NULL, 
	status TEXT NOT NULL, 
	data JSONB NOT NULL, 
	run_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE, 
	priority INTEGER NOT NULL, 
	weight INTEGER NOT NULL, 
	critical BOOLEAN NOT NULL, 
	time_windows JSONB, 
	timezone TEXT, 
	timeout_seconds FLOAT NOT NULL, 
	correlation_key TEXT, 
	correlation_fixed BOOLEAN NOT NULL, 
	ordering_key TEXT, 
	key_order_at TIMESTAMP WITH TIME ZONE, 
	group_key TEXT, 
	attempt INTEGER NOT NULL, 
	max_attempts INTEGER NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	launched_at TIMESTAMP WITH TIME ZONE, 
	deadline TIMESTAMP WITH TIME ZONE, 
	owner TEXT, 
	launch_confirmed BOOLEAN NOT NULL, 
	result JSONB, 
	error JSONB, 
	replay_of TEXT, 
	body_hash TEXT NOT NULL, 
	finished_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	trace TEXT, 
	history_folded BOOLEAN DEFAULT false NOT NULL, 
	history_source TEXT, 
	CONSTRAINT archived_jobs_pkey PRIMARY KEY (queue, id)
);

CREATE INDEX ix_archived_jobs_finished ON archived_jobs (finished_at, queue, id);

CREATE INDEX ix_archived_jobs_folded_key ON archived_jobs (correlation_key) WHERE history_source IS NOT NULL;

CREATE INDEX ix_archived_jobs_queue_finished ON archived_jobs (queue, finished_at, id) WHERE finished_at IS NOT NULL;

CREATE INDEX ix_archived_jobs_unsucceeded ON archived_jobs (status, finished_at, queue, id) WHERE status != 'succeeded';

CREATE TABLE daemons (
	owner TEXT NOT NULL, 
	started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	heartbeat_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (owner)
);

CREATE TABLE hipq_meta (
	key TEXT NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY (key)
);

CREATE TABLE job_attempts (
	id BIGSERIAL NOT NULL, 
	queue TEXT NOT NULL, 
	job_id TEXT NOT NULL, 
	attempt INTEGER NOT NULL, 
	correlation_key TEXT, 
	launched_at TIMESTAMP WITH TIME ZONE, 
	finished_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	outcome TEXT NOT NULL, 
	error JSONB, 
	response JSONB, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_job_attempts_job ON job_attempts (queue, job_id, attempt);

CREATE INDEX ix_job_attempts_key ON job_attempts (correlation_key);

CREATE TABLE job_intake (
	id BIGSERIAL NOT NULL, 
	queue TEXT NOT NULL, 
	job_id TEXT, 
	data JSONB NOT NULL, 
	run_after TIMESTAMP WITH TIME ZONE, 
	fields JSONB NOT NULL, 
	enqueued_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	error TEXT, 
	rejected_at TIMESTAMP WITH TIME ZONE, 
	size BIGINT GENERATED ALWAYS AS (octet_length(data::text) + octet_length(fields::text)) STORED, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_job_intake_job ON job_intake (queue, job_id) WHERE error IS NULL;

CREATE INDEX ix_job_intake_pending ON job_intake (queue, id) WHERE error IS NULL;

CREATE INDEX ix_job_intake_rejected ON job_intake (rejected_at, id) WHERE error IS NOT NULL;

CREATE TABLE jobs (
	queue TEXT NOT NULL, 
	id TEXT NOT NULL, 
	token TEXT NOT NULL, 
	status TEXT NOT NULL, 
	data JSONB NOT NULL, 
	run_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE, 
	priority INTEGER NOT NULL, 
	weight INTEGER NOT NULL, 
	critical BOOLEAN NOT NULL, 
	time_windows JSONB, 
	timezone TEXT, 
	timeout_seconds FLOAT NOT NULL, 
	correlation_key TEXT, 
	correlation_fixed BOOLEAN NOT NULL, 
	ordering_key TEXT, 
	key_order_at TIMESTAMP WITH TIME ZONE, 
	group_key TEXT, 
	attempt INTEGER NOT NULL, 
	max_attempts INTEGER NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	launched_at TIMESTAMP WITH TIME ZONE, 
	deadline TIMESTAMP WITH TIME ZONE, 
	owner TEXT, 
	launch_confirmed BOOLEAN NOT NULL, 
	result JSONB, 
	error JSONB, 
	replay_of TEXT, 
	body_hash TEXT NOT NULL, 
	trace TEXT, 
	CONSTRAINT jobs_pkey PRIMARY KEY (queue, id)
)
 WITH (fillfactor = 70);

CREATE INDEX ix_jobs_due_critical ON jobs (queue, run_at, priority, id) WHERE status = 'queued' AND critical = true;

CREATE INDEX ix_jobs_due_group_priority ON jobs (queue, group_key, priority, run_at, id) WHERE status = 'queued' AND group_key IS NOT NULL;

CREATE INDEX ix_jobs_due_group_time ON jobs (queue, group_key, run_at, priority, id) WHERE status = 'queued' AND group_key IS NOT NULL;

CREATE INDEX ix_jobs_due_priority ON jobs (queue, priority, run_at, id) WHERE status = 'queued';

CREATE INDEX ix_jobs_due_time ON jobs (queue, run_at, priority, id) WHERE status = 'queued';

CREATE INDEX ix_jobs_expires ON jobs (expires_at) WHERE status = 'queued' AND expires_at IS NOT NULL;

CREATE INDEX ix_jobs_ordering_key ON jobs (queue, ordering_key, key_order_at, id) WHERE ordering_key IS NOT NULL;

CREATE INDEX ix_jobs_running ON jobs (queue, deadline) WHERE status = 'running';

CREATE UNIQUE INDEX ux_jobs_correlation_key ON jobs (correlation_key) WHERE correlation_key IS NOT NULL;

CREATE TABLE launch_events (
	id BIGSERIAL NOT NULL, 
	queue TEXT NOT NULL, 
	group_key TEXT NOT NULL, 
	launched_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_launch_events_queue ON launch_events (queue, launched_at);

CREATE TABLE leases (
	queue TEXT NOT NULL, 
	owner TEXT NOT NULL, 
	acquired_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (queue)
);

CREATE TABLE merged_jobs (
	queue TEXT NOT NULL, 
	id TEXT NOT NULL, 
	into_id TEXT NOT NULL, 
	body_hash TEXT NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT merged_jobs_pkey PRIMARY KEY (queue, id)
);

CREATE TABLE partner_minutes (
	partner TEXT NOT NULL, 
	minute TIMESTAMP WITH TIME ZONE NOT NULL, 
	accepted BIGINT NOT NULL, 
	refused BIGINT NOT NULL, 
	in_flight_max BIGINT NOT NULL, 
	learned_rate FLOAT, 
	buckets JSONB NOT NULL, 
	CONSTRAINT partner_minutes_pkey PRIMARY KEY (partner, minute)
);

CREATE TABLE partner_state (
	partner TEXT NOT NULL, 
	snapshot JSONB NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	owner TEXT NOT NULL, 
	PRIMARY KEY (partner)
);

CREATE TABLE queue_backoffs (
	queue TEXT NOT NULL, 
	scope TEXT NOT NULL, 
	until TIMESTAMP WITH TIME ZONE NOT NULL, 
	reason TEXT NOT NULL, 
	streak INTEGER NOT NULL, 
	since TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT queue_backoffs_pkey PRIMARY KEY (queue, scope)
);

CREATE TABLE queue_state (
	queue TEXT NOT NULL, 
	effective FLOAT, 
	successes INTEGER NOT NULL, 
	decreased_at TIMESTAMP WITH TIME ZONE, 
	held JSONB, 
	held_at TIMESTAMP WITH TIME ZONE, 
	throttled_total BIGINT NOT NULL, 
	learned_rate FLOAT, 
	learned_since TIMESTAMP WITH TIME ZONE, 
	budget JSONB, 
	PRIMARY KEY (queue)
);

CREATE TABLE queues (
	id TEXT NOT NULL, 
	config JSONB NOT NULL, 
	paused BOOLEAN NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id)
);

CREATE TABLE response_inbox (
	id BIGSERIAL NOT NULL, 
	correlation_key TEXT NOT NULL, 
	attempt INTEGER, 
	status TEXT NOT NULL, 
	retryable BOOLEAN, 
	result JSONB, 
	error JSONB, 
	extend_seconds FLOAT, 
	source TEXT NOT NULL, 
	dedup_key TEXT, 
	received_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	applied_at TIMESTAMP WITH TIME ZONE, 
	outcome TEXT, 
	token TEXT, 
	PRIMARY KEY (id), 
	UNIQUE (dedup_key)
);

CREATE INDEX ix_response_inbox_applied ON response_inbox (applied_at) WHERE applied_at IS NOT NULL;

CREATE INDEX ix_response_inbox_pending_key ON response_inbox (correlation_key) WHERE applied_at IS NULL;

CREATE INDEX ix_response_inbox_pending_received ON response_inbox (received_at) WHERE applied_at IS NULL;

CREATE INDEX ix_response_inbox_unmatched ON response_inbox (received_at, id) WHERE outcome = 'unmatched';

-- hipq_enqueue: one row into the intake, and a wake-up for the daemons (delivered
-- when the caller's transaction commits; repeats within it are sent once). It
-- touches no other table than the intake (and reads the limit), so it never waits on
-- hipq's own locks. It refuses at once, in the caller's transaction, a row whose
-- data and fields are over the limit a daemon stored from api.max_body_bytes
-- (hipq_meta 'intake_max_bytes', 1 MiB when none did), or whose run_after is not a
-- finite time hipq can read. SECURITY DEFINER: it runs as hipq's role, so a
-- producer's role needs EXECUTE on it and nothing on the intake; it writes neither a
-- row's error nor its rejection time. Its search_path is fixed (below).
CREATE OR REPLACE FUNCTION hipq_enqueue(queue text, id text, data jsonb DEFAULT '{}',
                                        run_after timestamptz DEFAULT NULL,
                                        fields jsonb DEFAULT '{}') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $hipq$
DECLARE
    max_bytes int8 := COALESCE(
        (SELECT m.value::int8 FROM hipq_meta m WHERE m.key = 'intake_max_bytes'), 1048576);
    size int8 := octet_length(COALESCE($3, '{}')::text) + octet_length(COALESCE($5, '{}')::text);
BEGIN
    IF size > max_bytes THEN
        RAISE EXCEPTION 'hipq_enqueue: the data and fields of job % are % bytes of JSON text, over the intake''s limit of % bytes (api.max_body_bytes)',
            quote_nullable(left($2, 200)), size, max_bytes
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF $4 < '0001-01-02 00:00:00+00' OR $4 >= '9999-12-31 00:00:00+00' THEN
        RAISE EXCEPTION 'hipq_enqueue: run_after % of job % is not a finite time between the years 1 and 9999',
            $4, quote_nullable(left($2, 200))
            USING ERRCODE = 'datetime_field_overflow';
    END IF;
    INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at)
    VALUES ($1, $2, COALESCE($3, '{}'::jsonb), $4, COALESCE($5, '{}'::jsonb), now());
    PERFORM pg_notify('hipq_wake', 'intake');
END
$hipq$;

-- hipq_enqueue_many: hipq_enqueue for a JSON array of jobs {"id", "data", "run_after",
-- "fields"}, in order, in one statement (hipq.sql's enqueue and enqueue_many); every
-- row or none; one wake-up. Returns the number of rows written.
CREATE OR REPLACE FUNCTION hipq_enqueue_many(queue text, jobs jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $hipq$
DECLARE
    max_bytes int8 := COALESCE(
        (SELECT m.value::int8 FROM hipq_meta m WHERE m.key = 'intake_max_bytes'), 1048576);
    bad record;
    written int8;
BEGIN
    IF jsonb_typeof($2) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'hipq_enqueue_many: jobs must be a JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT j.n - 1 AS at, quote_nullable(left(j.job->>'id', 200)) AS job_id,
           jsonb_typeof(j.job) = 'object' AS object,
           octet_length(COALESCE(j.job->'data', '{}')::text)
               + octet_length(COALESCE(j.job->'fields', '{}')::text) AS size,
           j.job->>'run_after' AS run_after
    INTO bad
    FROM jsonb_array_elements($2) WITH ORDINALITY AS j(job, n)
    WHERE jsonb_typeof(j.job) <> 'object'
       OR octet_length(COALESCE(j.job->'data', '{}')::text)
              + octet_length(COALESCE(j.job->'fields', '{}')::text) > max_bytes
       OR (j.job->>'run_after')::timestamptz < '0001-01-02 00:00:00+00'
       OR (j.job->>'run_after')::timestamptz >= '9999-12-31 00:00:00+00'
    ORDER BY j.n LIMIT 1;
    IF FOUND THEN
        IF NOT bad.object THEN
            RAISE EXCEPTION 'hipq_enqueue_many: jobs[%] is not a JSON object', bad.at
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF bad.size > max_bytes THEN
            RAISE EXCEPTION 'hipq_enqueue_many: jobs[%] (id %): its data and fields are % bytes of JSON text, over the intake''s limit of % bytes (api.max_body_bytes)',
                bad.at, bad.job_id, bad.size, max_bytes
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        RAISE EXCEPTION 'hipq_enqueue_many: jobs[%] (id %): run_after % is not a finite time between the years 1 and 9999',
            bad.at, bad.job_id, bad.run_after
            USING ERRCODE = 'datetime_field_overflow';
    END IF;
    INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at)
    SELECT $1, j.job->>'id', COALESCE(j.job->'data', '{}'),
           (j.job->>'run_after')::timestamptz, COALESCE(j.job->'fields', '{}'), now()
    FROM jsonb_array_elements($2) WITH ORDINALITY AS j(job, n)
    ORDER BY j.n;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM pg_notify('hipq_wake', 'intake');
    END IF;
    RETURN written;
END
$hipq$;

-- A fixed search_path, as PostgreSQL advises for SECURITY DEFINER functions: the
-- system catalog first, then the schema hipq's tables are in (where this script
-- runs), pg_temp last, so no object a caller makes (a temporary table, a function in
-- a schema of its own) stands in for one of these. Only the roles granted EXECUTE
-- may call them (PostgreSQL grants it to PUBLIC by default):
--   GRANT EXECUTE ON FUNCTION hipq_enqueue(text, text, jsonb, timestamptz, jsonb),
--                             hipq_enqueue_many(text, jsonb) TO <producer role>;
DO $hipq$
DECLARE
    home text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'job_intake'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION hipq_enqueue(text, text, jsonb, timestamptz, jsonb) '
                   'SET search_path = pg_catalog, %I, pg_temp', home);
    EXECUTE format('ALTER FUNCTION hipq_enqueue_many(text, jsonb) '
                   'SET search_path = pg_catalog, %I, pg_temp', home);
END
$hipq$;
REVOKE ALL ON FUNCTION hipq_enqueue(text, text, jsonb, timestamptz, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION hipq_enqueue_many(text, jsonb) FROM PUBLIC;
