-- Schema version 10: a lighter archive. Every job archived paid for two indexes of
-- rare reads: archived_jobs by correlation key (a response whose key no live job
-- holds is looked up among past tries, ix_job_attempts_key since version 9: every
-- try is there) and by status (a listing of one status across queues; succeeded,
-- the usual end, is listed by finishing time instead, where it is most of the rows).
-- The status index now holds only the jobs that did not succeed, in page order.
DROP INDEX IF EXISTS ix_archived_jobs_correlation_key;
DROP INDEX IF EXISTS ix_archived_jobs_status;
CREATE INDEX IF NOT EXISTS ix_archived_jobs_unsucceeded
    ON archived_jobs (status, finished_at, queue, id) WHERE status != 'succeeded';
