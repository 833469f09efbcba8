DROP INDEX IF EXISTS sluice_limit_key_prefix;
