-- Schema version 1 on SQLite: timestamps are REAL seconds since the epoch, JSON is
-- text, ids are INTEGER PRIMARY KEY (the rowid). Every statement is IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS archived_jobs (
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    token TEXT NOT NULL,
    status TEXT NOT NULL,
    data JSON NOT NULL,
    run_at FLOAT NOT NULL,
    expires_at FLOAT,
    priority INTEGER NOT NULL,
    weight INTEGER NOT NULL,
    critical BOOLEAN NOT NULL,
    time_windows JSON,
    timezone TEXT,
    timeout_seconds FLOAT NOT NULL,
    correlation_key TEXT,
    correlation_fixed BOOLEAN NOT NULL,
    ordering_key TEXT,
    key_order_at FLOAT,
    group_key TEXT,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    created_at FLOAT NOT NULL,
    updated_at FLOAT NOT NULL,
    launched_at FLOAT,
    deadline FLOAT,
    owner TEXT,
    launch_confirmed BOOLEAN NOT NULL,
    result JSON,
    error JSON,
    replay_of TEXT,
    body_hash TEXT NOT NULL,
    finished_at FLOAT NOT NULL,
    CONSTRAINT archived_jobs_pkey PRIMARY KEY (queue, id)
);

CREATE INDEX IF NOT EXISTS ix_archived_jobs_correlation_key ON archived_jobs (correlation_key);
CREATE INDEX IF NOT EXISTS ix_archived_jobs_finished ON archived_jobs (finished_at, queue, id);
CREATE INDEX IF NOT EXISTS ix_archived_jobs_status ON archived_jobs (status, finished_at);

CREATE TABLE IF NOT EXISTS hipq_meta (
    "key" TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY ("key")
);

CREATE TABLE IF NOT EXISTS job_attempts (
    id INTEGER NOT NULL,
    queue TEXT NOT NULL,
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    correlation_key TEXT,
    launched_at FLOAT,
    finished_at FLOAT NOT NULL,
    outcome TEXT NOT NULL,
    error JSON,
    response JSON,
    PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS ix_job_attempts_job ON job_attempts (queue, job_id, attempt);
CREATE INDEX IF NOT EXISTS ix_job_attempts_finished ON job_attempts (finished_at);

CREATE TABLE IF NOT EXISTS jobs (
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    token TEXT NOT NULL,
    status TEXT NOT NULL,
    data JSON NOT NULL,
    run_at FLOAT NOT NULL,
    expires_at FLOAT,
    priority INTEGER NOT NULL,
    weight INTEGER NOT NULL,
    critical BOOLEAN NOT NULL,
    time_windows JSON,
    timezone TEXT,
    timeout_seconds FLOAT NOT NULL,
    correlation_key TEXT,
    correlation_fixed BOOLEAN NOT NULL,
    ordering_key TEXT,
    key_order_at FLOAT,
    group_key TEXT,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    created_at FLOAT NOT NULL,
    updated_at FLOAT NOT NULL,
    launched_at FLOAT,
    deadline FLOAT,
    owner TEXT,
    launch_confirmed BOOLEAN NOT NULL,
    result JSON,
    error JSON,
    replay_of TEXT,
    body_hash TEXT NOT NULL,
    CONSTRAINT jobs_pkey PRIMARY KEY (queue, id)
);

CREATE INDEX IF NOT EXISTS ix_jobs_due_critical ON jobs (queue, run_at, priority, id) WHERE status = 'queued' AND critical = 1;
CREATE INDEX IF NOT EXISTS ix_jobs_due_group_priority ON jobs (queue, group_key, priority, run_at, id) WHERE status = 'queued' AND group_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_jobs_due_group_time ON jobs (queue, group_key, run_at, priority, id) WHERE status = 'queued' AND group_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_jobs_due_priority ON jobs (queue, priority, run_at, id) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS ix_jobs_due_time ON jobs (queue, run_at, priority, id) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS ix_jobs_expires ON jobs (expires_at) WHERE status = 'queued' AND expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_jobs_ordering_key ON jobs (queue, ordering_key, key_order_at, id) WHERE ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_jobs_running ON jobs (queue, deadline) WHERE status = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS ux_jobs_correlation_key ON jobs (correlation_key);

CREATE TABLE IF NOT EXISTS launch_events (
    id INTEGER NOT NULL,
    queue TEXT NOT NULL,
    group_key TEXT NOT NULL,
    launched_at FLOAT NOT NULL,
    PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS ix_launch_events_queue ON launch_events (queue, launched_at);

CREATE TABLE IF NOT EXISTS leases (
    queue TEXT NOT NULL,
    owner TEXT NOT NULL,
    acquired_at FLOAT NOT NULL,
    expires_at FLOAT NOT NULL,
    PRIMARY KEY (queue)
);

CREATE TABLE IF NOT EXISTS merged_jobs (
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    into_id TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    created_at FLOAT NOT NULL,
    CONSTRAINT merged_jobs_pkey PRIMARY KEY (queue, id)
);

CREATE TABLE IF NOT EXISTS queues (
    id TEXT NOT NULL,
    config JSON NOT NULL,
    paused BOOLEAN NOT NULL,
    created_at FLOAT NOT NULL,
    updated_at FLOAT NOT NULL,
    PRIMARY KEY (id)
);

CREATE TABLE IF NOT EXISTS response_inbox (
    id INTEGER NOT NULL,
    correlation_key TEXT NOT NULL,
    attempt INTEGER,
    status TEXT NOT NULL,
    retryable BOOLEAN,
    result JSON,
    error JSON,
    extend_seconds FLOAT,
    source TEXT NOT NULL,
    dedup_key TEXT,
    received_at FLOAT NOT NULL,
    applied_at FLOAT,
    outcome TEXT,
    PRIMARY KEY (id),
    UNIQUE (dedup_key)
);

CREATE INDEX IF NOT EXISTS ix_response_inbox_applied ON response_inbox (applied_at);
CREATE INDEX IF NOT EXISTS ix_response_inbox_pending_key ON response_inbox (correlation_key) WHERE applied_at IS NULL;
CREATE INDEX IF NOT EXISTS ix_response_inbox_pending_received ON response_inbox (received_at) WHERE applied_at IS NULL;
