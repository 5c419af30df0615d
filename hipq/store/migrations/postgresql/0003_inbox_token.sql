-- Schema version 3: a response from a signed callback URL carries the token of the
-- job it was issued for (applied only to that job's try); archived jobs listed by
-- queue name (GET /v1/archived-jobs?name=) use an index.
ALTER TABLE response_inbox ADD COLUMN IF NOT EXISTS token TEXT;
CREATE INDEX IF NOT EXISTS ix_archived_jobs_queue_finished
    ON archived_jobs (queue, finished_at, id);
