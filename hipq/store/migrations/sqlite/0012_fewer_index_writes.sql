-- Schema version 12: fewer index entries written per job. The applied responses by
-- time (read by the pruning of old responses only) without the pending ones, which
-- were indexed there at insert with a NULL time and again once applied. (On
-- PostgreSQL the jobs table also keeps room on its pages for updates in place; SQLite
-- has no such setting.)
DROP INDEX IF EXISTS ix_response_inbox_applied;
CREATE INDEX IF NOT EXISTS ix_response_inbox_applied ON response_inbox (applied_at)
    WHERE applied_at IS NOT NULL;
