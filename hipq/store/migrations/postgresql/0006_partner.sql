-- Schema version 6: the partner's word (docs/throttling.md). A partner's pause per scope of a
-- queue, and what the owner of a queue learned of it (adaptive limit, held jobs by
-- reason, throttled tries), so that every daemon serves it and the next owner keeps it.
CREATE TABLE IF NOT EXISTS queue_backoffs (
    queue TEXT NOT NULL,
    scope TEXT NOT NULL,
    until TIMESTAMP WITH TIME ZONE NOT NULL,
    reason TEXT NOT NULL,
    streak INTEGER NOT NULL,
    since TIMESTAMP WITH TIME ZONE NOT NULL,
    CONSTRAINT queue_backoffs_pkey PRIMARY KEY (queue, scope)
);

CREATE TABLE IF NOT EXISTS queue_state (
    queue TEXT NOT NULL,
    effective FLOAT,
    successes INTEGER NOT NULL,
    decreased_at TIMESTAMP WITH TIME ZONE,
    held JSONB,
    held_at TIMESTAMP WITH TIME ZONE,
    throttled_total BIGINT NOT NULL,
    PRIMARY KEY (queue)
);
