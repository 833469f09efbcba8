ALTER TABLE sluice_usage DROP COLUMN IF EXISTS input_tokens, DROP COLUMN IF EXISTS output_tokens;
ALTER TABLE sluice_release DROP COLUMN IF EXISTS refund_output;
ALTER TABLE sluice_ticket DROP CONSTRAINT IF EXISTS sluice_ticket_output_cost,
    DROP COLUMN IF EXISTS output_cost, DROP COLUMN IF EXISTS actual_output;
ALTER TABLE sluice_limit
    DROP COLUMN IF EXISTS input_tokens_per_minute, DROP COLUMN IF EXISTS input_token_burst,
    DROP COLUMN IF EXISTS output_tokens_per_minute, DROP COLUMN IF EXISTS output_token_burst,
    DROP COLUMN IF EXISTS input_token_level, DROP COLUMN IF EXISTS input_token_at,
    DROP COLUMN IF EXISTS output_token_level, DROP COLUMN IF EXISTS output_token_at,
    DROP COLUMN IF EXISTS learned_input_tokens_per_minute, DROP COLUMN IF EXISTS learned_input_token_burst,
    DROP COLUMN IF EXISTS learned_output_tokens_per_minute, DROP COLUMN IF EXISTS learned_output_token_burst;
