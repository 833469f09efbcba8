DROP FUNCTION IF EXISTS sluice_fail(text);
