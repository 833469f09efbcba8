ALTER TABLE sluice_allowance_release DROP COLUMN IF EXISTS reported, DROP COLUMN IF EXISTS charged;
ALTER TABLE sluice_ticket DROP COLUMN IF EXISTS allowance_charged;
