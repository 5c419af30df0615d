-- Schema version 9: past tries by correlation key. A response or a callback whose key
-- no live job holds is looked up among past tries (late, or stale) by its key; without
-- this index that lookup read the whole history, once per such response (docs/internals.md: a
-- tick's cost is O(what changed), never O(history)). Building it on a large
-- job_attempts table takes a while and blocks writes to the table meanwhile.
CREATE INDEX IF NOT EXISTS ix_job_attempts_key ON job_attempts (correlation_key);
