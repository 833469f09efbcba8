ALTER TABLE sluice_owner DROP COLUMN IF EXISTS listens;
