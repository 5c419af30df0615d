-- Schema version 12: fewer index entries written per job.
--
-- Room on the jobs table's pages for updates in place. A job's row is updated while
-- it runs (its launch confirmed, a heartbeat's updated_at); where the new version
-- fits on the row's own page and no indexed column changes, PostgreSQL writes it
-- there without new index entries (a HOT update). On pages filled to the brim every
-- such update went to another page with an entry in each of the row's indexes. New
-- rows now fill a page to 70%; pages already written keep their rows (the room
-- appears as vacuum frees them). In a callback round trip the launch confirmation's
-- WAL went from 690 to 200 bytes a job, its time halved (docs/benchmarks.md).
ALTER TABLE jobs SET (fillfactor = 70);
-- The applied responses by time (read by the pruning of old responses only) without
-- the pending ones: every response was indexed there at insert with a NULL time,
-- and again once applied.
DROP INDEX IF EXISTS ix_response_inbox_applied;
CREATE INDEX IF NOT EXISTS ix_response_inbox_applied ON response_inbox (applied_at)
    WHERE applied_at IS NOT NULL;
