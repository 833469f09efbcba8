DROP TRIGGER IF EXISTS sluice_limit_changed ON sluice_limit;
DROP TRIGGER IF EXISTS sluice_limit_created_or_deleted ON sluice_limit;
DROP FUNCTION IF EXISTS sluice_limit_record();
DROP FUNCTION IF EXISTS sluice_limit_learned(sluice_limit);
DROP FUNCTION IF EXISTS sluice_limit_config(sluice_limit);
DROP TABLE IF EXISTS sluice_limit_change;
