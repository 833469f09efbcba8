-- Each ticket changes state about three times (claimed, completed, delivered), and every change of a
-- row whose state is in an index predicate writes a new entry into each of the table's indexes whose
-- predicate the new row meets. The owner and activity indexes covered every state, so a claim and a
-- completion each paid for entries nobody reads. They now cover only the states their readers ask for:
--   - owner: TakeAdmitted (admitted), HandBack and pruning (queued, admitted, running);
--   - activity: a retry finding its earlier attempt (queued, returned).
-- A completion (to finished) now writes the primary key and the finished index only, a claim of a
-- claimer's own ticket (to running) the primary key and the owner index only.
-- CONCURRENTLY cannot run in a migration's transaction; the tables of a live queue hold the backlog
-- only, so the builds are short.
DROP INDEX sluice_ticket_owner;
CREATE INDEX sluice_ticket_owner ON sluice_ticket (owner, state) WHERE state IN ('queued', 'admitted', 'running');
DROP INDEX sluice_ticket_activity;
CREATE INDEX sluice_ticket_activity ON sluice_ticket (namespace, workflow_id, activity_id) WHERE state IN ('queued', 'returned');
