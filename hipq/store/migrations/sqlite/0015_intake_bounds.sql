-- Schema version 15: the intake bounded (docs/from-your-database.md, "Limits").
-- job_intake.size: the bytes of a row's data and fields as stored text, computed by
-- SQLite as the row is written, whoever writes it, so ingestion reads rows within a
-- byte budget and leaves a row over the limit unread. A stored generated column
-- cannot be added to a table: the table is made again, its rows and ids kept.
CREATE TABLE job_intake_v15 (
    id INTEGER NOT NULL,
    queue TEXT NOT NULL,
    job_id TEXT,
    data JSON NOT NULL,
    run_after FLOAT,
    fields JSON NOT NULL,
    enqueued_at FLOAT NOT NULL,
    error TEXT,
    rejected_at FLOAT,
    size BIGINT GENERATED ALWAYS AS (length(CAST(data AS BLOB)) + length(CAST(fields AS BLOB))) STORED,
    PRIMARY KEY (id)
);

INSERT INTO job_intake_v15 (id, queue, job_id, data, run_after, fields, enqueued_at, error,
                            rejected_at)
SELECT id, queue, job_id, data, run_after, fields, enqueued_at, error, rejected_at
FROM job_intake;

DROP TABLE job_intake;

ALTER TABLE job_intake_v15 RENAME TO job_intake;

CREATE INDEX ix_job_intake_job ON job_intake (queue, job_id) WHERE error IS NULL;
CREATE INDEX ix_job_intake_pending ON job_intake (queue, id) WHERE error IS NULL;
CREATE INDEX ix_job_intake_rejected ON job_intake (rejected_at, id) WHERE error IS NOT NULL;
