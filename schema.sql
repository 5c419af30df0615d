-- hipq schema version 14. Generated from hipq/store/schema.py
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

CREATE OR REPLACE FUNCTION hipq_enqueue(queue text, id text, data jsonb DEFAULT '{}',
                                        run_after timestamptz DEFAULT NULL,
                                        fields jsonb DEFAULT '{}') RETURNS void
LANGUAGE sql AS $hipq$
    INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at)
    VALUES ($1, $2, COALESCE($3, '{}'::jsonb), $4, COALESCE($5, '{}'::jsonb), now());
    SELECT pg_notify('hipq_wake', 'intake');
$hipq$;
