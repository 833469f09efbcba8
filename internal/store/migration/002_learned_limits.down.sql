ALTER TABLE sluice_limit
    DROP COLUMN IF EXISTS learned_requests_per_second,
    DROP COLUMN IF EXISTS learned_burst,
    DROP COLUMN IF EXISTS learned_tokens_per_minute,
    DROP COLUMN IF EXISTS learned_token_burst,
    DROP COLUMN IF EXISTS learned_at;
