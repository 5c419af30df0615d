-- Schema version 7: enqueue from SQL (docs/from-your-database.md). Producers insert
-- into job_intake in their own transactions (hipq.sql on the same database file); the daemon ingests
-- the pending rows (error NULL) into jobs and deletes them; a row that breaks a rule
-- stays, with its error.
CREATE TABLE IF NOT EXISTS job_intake (
    id INTEGER NOT NULL,
    queue TEXT NOT NULL,
    job_id TEXT,
    data JSON NOT NULL,
    run_after FLOAT,
    fields JSON NOT NULL,
    enqueued_at FLOAT NOT NULL,
    error TEXT,
    rejected_at FLOAT,
    PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS ix_job_intake_job ON job_intake (queue, job_id) WHERE error IS NULL;
CREATE INDEX IF NOT EXISTS ix_job_intake_pending ON job_intake (queue, id) WHERE error IS NULL;
CREATE INDEX IF NOT EXISTS ix_job_intake_rejected ON job_intake (rejected_at, id) WHERE error IS NOT NULL;
