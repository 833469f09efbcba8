-- What the provider's rate-limit headers taught about a limit: its real rates, when lower than the
-- configured ones (never higher). NULL means nothing learned; admission uses the lower of the two.
ALTER TABLE sluice_limit
    ADD COLUMN learned_requests_per_second double precision CHECK (learned_requests_per_second > 0),
    ADD COLUMN learned_burst               double precision CHECK (learned_burst >= 1),
    ADD COLUMN learned_tokens_per_minute   double precision CHECK (learned_tokens_per_minute > 0),
    ADD COLUMN learned_token_burst         double precision CHECK (learned_token_burst >= 1),
    ADD COLUMN learned_at                  timestamptz;
