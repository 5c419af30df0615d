-- Schema version 12: room on the jobs table's pages for updates in place. A job's
-- row is updated while it runs (its launch confirmed, a heartbeat's updated_at);
-- where the new version fits on the row's own page and no indexed column changes,
-- PostgreSQL writes it there without new index entries (a HOT update). On pages
-- filled to the brim every such update went to another page with an entry in each
-- of the row's indexes. New rows now fill a page to 70%; pages already written keep
-- their rows (the room appears as vacuum frees them). A callback round trip:
-- the launch confirmation's WAL 690 -> 200 bytes a job, its time halved
-- (docs/benchmarks.md, issue 28's seventh pass).
ALTER TABLE jobs SET (fillfactor = 70);
