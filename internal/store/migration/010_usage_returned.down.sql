ALTER TABLE sluice_usage DROP COLUMN IF EXISTS returned_input, DROP COLUMN IF EXISTS returned_output;
