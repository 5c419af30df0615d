-- Schema version 11: a first history entry kept in the archived row. A try that ran
-- within its tick and succeeded (an in-tick run, docs/configuration.md) used to add a
-- row to job_attempts beside its archived row, with nothing in it the archived row
-- does not hold: its attempt, key, launch and finishing times, and "succeeded". Such
-- a job is now archived with history_folded set and no job_attempts row for that
-- try; a job's history reads the entry from the archived row.
ALTER TABLE archived_jobs ADD COLUMN IF NOT EXISTS history_folded BOOLEAN NOT NULL DEFAULT false;
