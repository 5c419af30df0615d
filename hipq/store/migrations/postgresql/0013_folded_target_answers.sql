-- Schema version 13: a try that succeeded by its target's own answer (a Python
-- target's return, an HTTP target's final answer) under a key hipq made for that try
-- is recorded in its archived row, as version 11 does for the tries that run in their
-- tick: history_folded set, history_source 'target' (the history entry's response is
-- {"source": "target"}, as its job_attempts row said), and no job_attempts row. The
-- readers of late responses find such a try by its key through the partial index.
-- In a claim-first Python lifecycle the archive statement writes 1,295 -> 910 bytes
-- of WAL a job (docs/benchmarks.md).
ALTER TABLE archived_jobs ADD COLUMN IF NOT EXISTS history_source TEXT;
CREATE INDEX IF NOT EXISTS ix_archived_jobs_folded_key ON archived_jobs (correlation_key)
    WHERE history_source IS NOT NULL;
