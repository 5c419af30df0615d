-- Schema version 4: one row per live daemon, refreshed at each lease renewal: the
-- cluster's membership (each daemon aims at ceil(queues / live daemons) leases).
CREATE TABLE IF NOT EXISTS daemons (
    owner TEXT NOT NULL,
    started_at TIMESTAMP WITH TIME ZONE NOT NULL,
    heartbeat_at TIMESTAMP WITH TIME ZONE NOT NULL,
    expires_at TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (owner)
);
