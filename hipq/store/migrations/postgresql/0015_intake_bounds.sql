-- Schema version 15: the intake bounded and least-privileged (docs/from-your-database.md,
-- "Grants" and "Limits").
--
-- job_intake.size: the bytes of a row's data and fields as JSON text, computed by
-- PostgreSQL as the row is written, whoever writes it (no writer can set it), so
-- ingestion reads rows within a byte budget and leaves a row over the limit unread.
ALTER TABLE job_intake ADD COLUMN IF NOT EXISTS size BIGINT
    GENERATED ALWAYS AS (octet_length(data::text) + octet_length(fields::text)) STORED;

-- hipq_enqueue: one row into the intake, and a wake-up for the daemons (delivered
-- when the caller's transaction commits; repeats within it are sent once). It
-- touches no other table than the intake (and reads the limit), so it never waits on
-- hipq's own locks. It refuses at once, in the caller's transaction, a row whose
-- data and fields are over the limit a daemon stored from api.max_body_bytes
-- (hipq_meta 'intake_max_bytes', 1 MiB when none did), or whose run_after is not a
-- finite time hipq can read. SECURITY DEFINER: it runs as hipq's role, so a
-- producer's role needs EXECUTE on it and nothing on the intake; it writes neither a
-- row's error nor its rejection time. Its search_path is fixed (below).
CREATE OR REPLACE FUNCTION hipq_enqueue(queue text, id text, data jsonb DEFAULT '{}',
                                        run_after timestamptz DEFAULT NULL,
                                        fields jsonb DEFAULT '{}') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $hipq$
DECLARE
    max_bytes int8 := COALESCE(
        (SELECT m.value::int8 FROM hipq_meta m WHERE m.key = 'intake_max_bytes'), 1048576);
    size int8 := octet_length(COALESCE($3, '{}')::text) + octet_length(COALESCE($5, '{}')::text);
BEGIN
    IF size > max_bytes THEN
        RAISE EXCEPTION 'hipq_enqueue: the data and fields of job % are % bytes of JSON text, over the intake''s limit of % bytes (api.max_body_bytes)',
            quote_nullable(left($2, 200)), size, max_bytes
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF $4 < '0001-01-02 00:00:00+00' OR $4 >= '9999-12-31 00:00:00+00' THEN
        RAISE EXCEPTION 'hipq_enqueue: run_after % of job % is not a finite time between the years 1 and 9999',
            $4, quote_nullable(left($2, 200))
            USING ERRCODE = 'datetime_field_overflow';
    END IF;
    INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at)
    VALUES ($1, $2, COALESCE($3, '{}'::jsonb), $4, COALESCE($5, '{}'::jsonb), now());
    PERFORM pg_notify('hipq_wake', 'intake');
END
$hipq$;

-- hipq_enqueue_many: hipq_enqueue for a JSON array of jobs {"id", "data", "run_after",
-- "fields"}, in order, in one statement (hipq.sql's enqueue and enqueue_many); every
-- row or none; one wake-up. Returns the number of rows written.
CREATE OR REPLACE FUNCTION hipq_enqueue_many(queue text, jobs jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $hipq$
DECLARE
    max_bytes int8 := COALESCE(
        (SELECT m.value::int8 FROM hipq_meta m WHERE m.key = 'intake_max_bytes'), 1048576);
    bad record;
    written int8;
BEGIN
    IF jsonb_typeof($2) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'hipq_enqueue_many: jobs must be a JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT j.n - 1 AS at, quote_nullable(left(j.job->>'id', 200)) AS job_id,
           jsonb_typeof(j.job) = 'object' AS object,
           octet_length(COALESCE(j.job->'data', '{}')::text)
               + octet_length(COALESCE(j.job->'fields', '{}')::text) AS size,
           j.job->>'run_after' AS run_after
    INTO bad
    FROM jsonb_array_elements($2) WITH ORDINALITY AS j(job, n)
    WHERE jsonb_typeof(j.job) <> 'object'
       OR octet_length(COALESCE(j.job->'data', '{}')::text)
              + octet_length(COALESCE(j.job->'fields', '{}')::text) > max_bytes
       OR (j.job->>'run_after')::timestamptz < '0001-01-02 00:00:00+00'
       OR (j.job->>'run_after')::timestamptz >= '9999-12-31 00:00:00+00'
    ORDER BY j.n LIMIT 1;
    IF FOUND THEN
        IF NOT bad.object THEN
            RAISE EXCEPTION 'hipq_enqueue_many: jobs[%] is not a JSON object', bad.at
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF bad.size > max_bytes THEN
            RAISE EXCEPTION 'hipq_enqueue_many: jobs[%] (id %): its data and fields are % bytes of JSON text, over the intake''s limit of % bytes (api.max_body_bytes)',
                bad.at, bad.job_id, bad.size, max_bytes
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        RAISE EXCEPTION 'hipq_enqueue_many: jobs[%] (id %): run_after % is not a finite time between the years 1 and 9999',
            bad.at, bad.job_id, bad.run_after
            USING ERRCODE = 'datetime_field_overflow';
    END IF;
    INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at)
    SELECT $1, j.job->>'id', COALESCE(j.job->'data', '{}'),
           (j.job->>'run_after')::timestamptz, COALESCE(j.job->'fields', '{}'), now()
    FROM jsonb_array_elements($2) WITH ORDINALITY AS j(job, n)
    ORDER BY j.n;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM pg_notify('hipq_wake', 'intake');
    END IF;
    RETURN written;
END
$hipq$;

-- A fixed search_path, as PostgreSQL advises for SECURITY DEFINER functions: the
-- system catalog first, then the schema hipq's tables are in (where this script
-- runs), pg_temp last, so no object a caller makes (a temporary table, a function in
-- a schema of its own) stands in for one of these. Only the roles granted EXECUTE
-- may call them (PostgreSQL grants it to PUBLIC by default):
--   GRANT EXECUTE ON FUNCTION hipq_enqueue(text, text, jsonb, timestamptz, jsonb),
--                             hipq_enqueue_many(text, jsonb) TO <producer role>;
DO $hipq$
DECLARE
    home text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'job_intake'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION hipq_enqueue(text, text, jsonb, timestamptz, jsonb) '
                   'SET search_path = pg_catalog, %I, pg_temp', home);
    EXECUTE format('ALTER FUNCTION hipq_enqueue_many(text, jsonb) '
                   'SET search_path = pg_catalog, %I, pg_temp', home);
END
$hipq$;
REVOKE ALL ON FUNCTION hipq_enqueue(text, text, jsonb, timestamptz, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION hipq_enqueue_many(text, jsonb) FROM PUBLIC;
