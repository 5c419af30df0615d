-- Schema version 5: responses recorded as unmatched are listed newest first
-- (GET /v1/responses?outcome=unmatched) through a partial index of those rows only.
CREATE INDEX IF NOT EXISTS ix_response_inbox_unmatched ON response_inbox (received_at, id)
    WHERE outcome = 'unmatched';
