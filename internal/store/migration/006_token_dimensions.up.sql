-- Token budgets by dimension: a limit may meter input and output tokens apart (Anthropic's ITPM and
-- OTPM) beside the combined budget (tokens_per_minute, OpenAI's TPM). Each is a continuously refilled
-- bucket with its burst; 0 means not set, which is what every existing row gets, so a limit that had
-- one budget keeps exactly that one.
ALTER TABLE sluice_limit
    ADD COLUMN input_tokens_per_minute          double precision NOT NULL DEFAULT 0 CHECK (input_tokens_per_minute >= 0),
    ADD COLUMN input_token_burst                double precision NOT NULL DEFAULT 0 CHECK (input_token_burst >= 0),
    ADD COLUMN output_tokens_per_minute         double precision NOT NULL DEFAULT 0 CHECK (output_tokens_per_minute >= 0),
    ADD COLUMN output_token_burst               double precision NOT NULL DEFAULT 0 CHECK (output_token_burst >= 0),
    -- State. A NULL bucket time means a full bucket.
    ADD COLUMN input_token_level                double precision NOT NULL DEFAULT 0,
    ADD COLUMN input_token_at                   timestamptz,
    ADD COLUMN output_token_level               double precision NOT NULL DEFAULT 0,
    ADD COLUMN output_token_at                  timestamptz,
    -- What the provider's headers taught (NULL: nothing), as for the combined budget.
    ADD COLUMN learned_input_tokens_per_minute  double precision CHECK (learned_input_tokens_per_minute > 0),
    ADD COLUMN learned_input_token_burst        double precision CHECK (learned_input_token_burst >= 1),
    ADD COLUMN learned_output_tokens_per_minute double precision CHECK (learned_output_tokens_per_minute > 0),
    ADD COLUMN learned_output_token_burst       double precision CHECK (learned_output_token_burst >= 1);

-- A ticket's reservation and reported usage by dimension: cost and actual_cost stay the totals, and
-- these are their output parts (the rest is input). An existing ticket reserved its cost as one figure,
-- which counts as input: output 0. The constraint is NOT VALID so that adding it does not scan the
-- table under its lock; every existing row has 0, which satisfies it.
ALTER TABLE sluice_ticket
    ADD COLUMN output_cost   bigint NOT NULL DEFAULT 0,
    ADD COLUMN actual_output bigint,
    ADD CONSTRAINT sluice_ticket_output_cost CHECK (output_cost >= 0 AND output_cost <= cost) NOT VALID;

-- The part of a release's refund that is of output tokens (the rest of refund is input).
ALTER TABLE sluice_release ADD COLUMN refund_output double precision NOT NULL DEFAULT 0;

-- Usage history by dimension: tokens stays the total; these are its input and output parts.
ALTER TABLE sluice_usage
    ADD COLUMN input_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
