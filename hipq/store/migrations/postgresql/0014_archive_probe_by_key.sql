-- Schema version 14: "is this id archived already?" reads the primary key.
--
-- Step 3's archive, the in-tick archive and the enqueue probe archived_jobs by
-- (queue, id). While the archive is young and has no statistics, the planner costs
-- ix_archived_jobs_queue_finished (queue, finished_at, id) the same as the primary
-- key for that probe and took it on new databases: only the queue is a bound there,
-- so each probe read the queue's whole archive, one probe a job (a 500-job archive
-- statement of a first tick read 5,368 index pages and took 80 ms instead of 20).
-- The index is now partial on a predicate every row meets (finished_at is NOT NULL):
-- a probe by (queue, id) does not imply it, so the primary key is the one index it
-- can read. The readers of a queue's archive by time state the predicate.
DROP INDEX IF EXISTS ix_archived_jobs_queue_finished;
CREATE INDEX IF NOT EXISTS ix_archived_jobs_queue_finished
    ON archived_jobs (queue, finished_at, id) WHERE finished_at IS NOT NULL;
