-- Schema version 13: the column and index PostgreSQL's archived rows use to hold a
-- try that succeeded by its target's own answer (history_source; see the PostgreSQL
-- file). SQLite keeps recording every try in job_attempts: the column stays NULL.
ALTER TABLE archived_jobs ADD COLUMN history_source TEXT;
CREATE INDEX IF NOT EXISTS ix_archived_jobs_folded_key ON archived_jobs (correlation_key)
    WHERE history_source IS NOT NULL;
