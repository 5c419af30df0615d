-- Schema version 7: enqueue from SQL (docs/from-your-database.md). Producers insert
-- into job_intake in their own transactions, through hipq_enqueue() (any language, a trigger, a stored
-- procedure) or hipq.sql; the owner of the queue ingests the pending rows (error
-- NULL) into jobs with every rule of an enqueue, and deletes them; a row that breaks
-- a rule stays, with its error, until pruned.
CREATE TABLE IF NOT EXISTS job_intake (
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

CREATE INDEX IF NOT EXISTS ix_job_intake_job ON job_intake (queue, job_id) WHERE error IS NULL;
CREATE INDEX IF NOT EXISTS ix_job_intake_pending ON job_intake (queue, id) WHERE error IS NULL;
CREATE INDEX IF NOT EXISTS ix_job_intake_rejected ON job_intake (rejected_at, id) WHERE error IS NOT NULL;

-- hipq_enqueue: one row into the intake, and a wake-up for the daemons (delivered
-- when the caller's transaction commits; repeats within it are sent once). It
-- touches no other table, so it never waits on hipq's own locks.
CREATE OR REPLACE FUNCTION hipq_enqueue(queue text, id text, data jsonb DEFAULT '{}',
                                        run_after timestamptz DEFAULT NULL,
                                        fields jsonb DEFAULT '{}') RETURNS void
LANGUAGE sql AS $hipq$
    INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at)
    VALUES ($1, $2, COALESCE($3, '{}'::jsonb), $4, COALESCE($5, '{}'::jsonb), now());
    SELECT pg_notify('hipq_wake', 'intake');
$hipq$;
