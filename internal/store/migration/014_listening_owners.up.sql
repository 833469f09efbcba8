-- Owners that listen for their admissions (issue 39): a claim moves such an owner's tickets straight
-- to running and puts their IDs in the owner's notification, and the owner reads and runs them with no
-- take, which wrote every ticket a second time. An owner that does not listen (it polls behind a
-- transaction pooler, or it is of an older release, which never sets the column) has its tickets
-- admitted and takes them, as before. A constant default, no scan: safe while older replicas run.
ALTER TABLE sluice_owner ADD COLUMN listens boolean NOT NULL DEFAULT false;
