-- Schema version 17: what the owner of a partner's queues sees of the partner
-- (docs/http-api.md, "Partners"; docs/dashboard.md): its last snapshot (buckets,
-- in flight, learned rate, busiest keys), written at most once a second, and its
-- last hour per minute (accepted, refused, in flight at most, learned rate, bucket
-- use), so that every daemon serves the same and a restart keeps it. The owner
-- deletes a partner's minutes older than an hour as it writes.
CREATE TABLE IF NOT EXISTS partner_state (
    partner TEXT NOT NULL,
    snapshot JSON NOT NULL,
    updated_at FLOAT NOT NULL,
    owner TEXT NOT NULL,
    PRIMARY KEY (partner)
);

CREATE TABLE IF NOT EXISTS partner_minutes (
    partner TEXT NOT NULL,
    minute FLOAT NOT NULL,
    accepted INTEGER NOT NULL,
    refused INTEGER NOT NULL,
    in_flight_max INTEGER NOT NULL,
    learned_rate FLOAT,
    buckets JSON NOT NULL,
    CONSTRAINT partner_minutes_pkey PRIMARY KEY (partner, minute)
);
