-- Schema version 16: what a queue's owner learned of a partner that refuses without
-- saying why (docs/throttling.md, "Partners"): the launch rate it last refused
-- (CUBIC's w_max, launches a second) and when, so that the learned rate survives
-- restarts and handovers. And on the first queue of a partner, what its buckets hold
-- (docs/throttling.md, "Partners"), for the next owner.
ALTER TABLE queue_state ADD COLUMN IF NOT EXISTS learned_rate FLOAT;
ALTER TABLE queue_state ADD COLUMN IF NOT EXISTS learned_since TIMESTAMP WITH TIME ZONE;
ALTER TABLE queue_state ADD COLUMN IF NOT EXISTS budget JSONB;
