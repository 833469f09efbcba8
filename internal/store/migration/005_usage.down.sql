DROP TABLE sluice_usage;
