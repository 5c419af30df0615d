-- Schema version 2: the unique index on jobs.correlation_key leaves out jobs without
-- a key (a plain enqueue adds no entry); job_attempts loses an index no query used.
DROP INDEX IF EXISTS ux_jobs_correlation_key;
CREATE UNIQUE INDEX ux_jobs_correlation_key ON jobs (correlation_key)
    WHERE correlation_key IS NOT NULL;
DROP INDEX IF EXISTS ix_job_attempts_finished;
