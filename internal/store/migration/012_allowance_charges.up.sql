-- Which allowances counted a ticket, so that its release reconciles those and no other: an allowance
-- added while the ticket was in flight never counted it and gets nothing back (it over-admitted when a
-- release refunded every allowance the limit had at the time).
--
-- allowance_charged maps each limit key of the ticket that had allowances at its admission to the keys
-- (throttle.Allowance.Key) of those allowances; NULL for a ticket admitted by an older replica, whose
-- release falls back to the older rule (every allowance of the limit, when allowance_spend is set).
-- The allowance ledger's rows carry the same list (charged, NULL: the older rule), and now record the
-- release of every ticket that counted, its usage reported or not (reported), so that what the tickets
-- in flight hold of an allowance (throttle.AllowanceState.Held) drops as each ends: a ticket the
-- allowance has no room for waits, rather than being refused, while their refunds could make room.
-- Nullable columns and a constant default rewrite nothing; an older replica's statements name their
-- columns and leave these NULL or true, as the fallbacks expect. Safe while older replicas run.
ALTER TABLE sluice_ticket ADD COLUMN allowance_charged jsonb;
ALTER TABLE sluice_allowance_release
    ADD COLUMN charged  jsonb,
    ADD COLUMN reported boolean NOT NULL DEFAULT true;
