-- Schema version 16: what a queue's owner learned of a partner that refuses without
-- saying why (docs/throttling.md, "Partners"): the launch rate it last refused
-- (CUBIC's w_max, launches a second) and when (seconds since the epoch, as every
-- time here), so that the learned rate survives restarts and handovers. And on the
-- first queue of a partner, what its buckets hold (docs/throttling.md, "Partners").
ALTER TABLE queue_state ADD COLUMN learned_rate FLOAT;
ALTER TABLE queue_state ADD COLUMN learned_since FLOAT;
ALTER TABLE queue_state ADD COLUMN budget JSON;
