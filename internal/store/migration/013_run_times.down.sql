DROP TABLE IF EXISTS sluice_run_time;
