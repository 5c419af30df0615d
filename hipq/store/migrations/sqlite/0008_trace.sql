-- Schema version 8: traces (docs/traces.md). A job keeps the W3C trace
-- context it was enqueued with (traceparent, then a space and the tracestate if
-- any; NULL without one), in the hot table and in the archive.
ALTER TABLE jobs ADD COLUMN trace TEXT;
ALTER TABLE archived_jobs ADD COLUMN trace TEXT;
