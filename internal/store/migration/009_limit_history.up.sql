-- Limit history: every change of a limit's configuration, and of what the provider's headers taught
-- about it, with the limit's figures before and after, when and who. A trigger on sluice_limit fills
-- it, so that a change made in SQL is recorded as one made through pgqueue is. Operators' tools read
-- it (sluice limits history, the dashboard's charts); admission never does.
--
-- kind is 'created' (before is NULL), 'configured' (a configuration column changed), 'learned' (a
-- learned_* column changed: header learning, kept apart from what people set) or 'deleted' (after is
-- NULL). before and after hold a configuration under throttle.Limit's JSON names (max_concurrent,
-- requests_per_second, burst, tokens_per_minute, token_burst, max_inflight_tokens,
-- input_tokens_per_minute, input_token_burst, output_tokens_per_minute, output_token_burst); a
-- 'learned' record holds the learned figures under the same names, 0 where nothing was learned.
-- who is the transaction's sluice.changed_by setting (pgqueue sets it: the sluice command's user and
-- host, the dashboard's remote address, the program, "header learning"), else the session's user and
-- client address ("postgres@127.0.0.1", "postgres (local socket)").
CREATE TABLE sluice_limit_change (
    id     bigserial   PRIMARY KEY,
    key    text        NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind   text        NOT NULL CHECK (kind IN ('created', 'configured', 'learned', 'deleted')),
    before jsonb,
    after  jsonb,
    who    text        NOT NULL
);
-- A key's history, read back from now.
CREATE INDEX sluice_limit_change_key_at ON sluice_limit_change (key, at);
-- Prune deletes what is older than its retention without reading the rest.
CREATE INDEX sluice_limit_change_at ON sluice_limit_change (at);

-- sluice_limit_config and sluice_limit_learned are a row's configuration and learned figures as the
-- history stores them. jsonb takes a double's shortest exact text, so a figure reads back as set.
CREATE FUNCTION sluice_limit_config(l sluice_limit) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('max_concurrent', l.max_concurrent, 'requests_per_second', l.requests_per_second,
        'burst', l.burst, 'tokens_per_minute', l.tokens_per_minute, 'token_burst', l.token_burst,
        'max_inflight_tokens', l.max_inflight_tokens,
        'input_tokens_per_minute', l.input_tokens_per_minute, 'input_token_burst', l.input_token_burst,
        'output_tokens_per_minute', l.output_tokens_per_minute, 'output_token_burst', l.output_token_burst)
$$;

CREATE FUNCTION sluice_limit_learned(l sluice_limit) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('requests_per_second', coalesce(l.learned_requests_per_second, 0),
        'burst', coalesce(l.learned_burst, 0), 'tokens_per_minute', coalesce(l.learned_tokens_per_minute, 0),
        'token_burst', coalesce(l.learned_token_burst, 0),
        'input_tokens_per_minute', coalesce(l.learned_input_tokens_per_minute, 0),
        'input_token_burst', coalesce(l.learned_input_token_burst, 0),
        'output_tokens_per_minute', coalesce(l.learned_output_tokens_per_minute, 0),
        'output_token_burst', coalesce(l.learned_output_token_burst, 0))
$$;

-- The trigger's function runs with the search_path of this migration (the schema), whatever the
-- session's. sluice.changed_at, when set, is the instant of the change (pgqueue's injected clock,
-- for tests); otherwise the database's clock.
CREATE FUNCTION sluice_limit_record() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    by_whom text := coalesce(nullif(current_setting('sluice.changed_by', true), ''),
        session_user || coalesce('@' || host(inet_client_addr()), ' (local socket)'));
    at_when timestamptz := coalesce(nullif(current_setting('sluice.changed_at', true), '')::timestamptz, clock_timestamp());
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO sluice_limit_change (key, at, kind, before, after, who)
        VALUES (NEW.key, at_when, 'created', NULL, sluice_limit_config(NEW), by_whom);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO sluice_limit_change (key, at, kind, before, after, who)
        VALUES (OLD.key, at_when, 'deleted', sluice_limit_config(OLD), NULL, by_whom);
    ELSE
        -- The trigger's WHEN let this row through: a configured or learned column differs (as a
        -- double: its jsonb may still be equal, then nothing is recorded).
        IF sluice_limit_config(OLD) IS DISTINCT FROM sluice_limit_config(NEW) THEN
            INSERT INTO sluice_limit_change (key, at, kind, before, after, who)
            VALUES (NEW.key, at_when, 'configured', sluice_limit_config(OLD), sluice_limit_config(NEW), by_whom);
        END IF;
        IF sluice_limit_learned(OLD) IS DISTINCT FROM sluice_limit_learned(NEW) THEN
            INSERT INTO sluice_limit_change (key, at, kind, before, after, who)
            VALUES (NEW.key, at_when, 'learned', sluice_limit_learned(OLD), sluice_limit_learned(NEW), by_whom);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_limit_created_or_deleted AFTER INSERT OR DELETE ON sluice_limit
    FOR EACH ROW EXECUTE FUNCTION sluice_limit_record();

-- Admission updates every limit row it decides on (buckets, in-flight figures, virtual time) at each
-- claim, release and observation: those updates pay this WHEN test and nothing else, since the state
-- columns are not in it. The trigger adds no index to sluice_limit, so the updates stay HOT.
CREATE TRIGGER sluice_limit_changed AFTER UPDATE ON sluice_limit FOR EACH ROW
    WHEN ((OLD.max_concurrent, OLD.requests_per_second, OLD.burst, OLD.tokens_per_minute, OLD.token_burst,
            OLD.max_inflight_tokens, OLD.input_tokens_per_minute, OLD.input_token_burst,
            OLD.output_tokens_per_minute, OLD.output_token_burst)
        IS DISTINCT FROM (NEW.max_concurrent, NEW.requests_per_second, NEW.burst, NEW.tokens_per_minute, NEW.token_burst,
            NEW.max_inflight_tokens, NEW.input_tokens_per_minute, NEW.input_token_burst,
            NEW.output_tokens_per_minute, NEW.output_token_burst)
        OR (OLD.learned_requests_per_second, OLD.learned_burst, OLD.learned_tokens_per_minute, OLD.learned_token_burst,
            OLD.learned_input_tokens_per_minute, OLD.learned_input_token_burst,
            OLD.learned_output_tokens_per_minute, OLD.learned_output_token_burst)
        IS DISTINCT FROM (NEW.learned_requests_per_second, NEW.learned_burst, NEW.learned_tokens_per_minute, NEW.learned_token_burst,
            NEW.learned_input_tokens_per_minute, NEW.learned_input_token_burst,
            NEW.learned_output_tokens_per_minute, NEW.learned_output_token_burst))
    EXECUTE FUNCTION sluice_limit_record();
