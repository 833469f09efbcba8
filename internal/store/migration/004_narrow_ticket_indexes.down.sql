DROP INDEX sluice_ticket_owner;
CREATE INDEX sluice_ticket_owner ON sluice_ticket (owner, state);
DROP INDEX sluice_ticket_activity;
CREATE INDEX sluice_ticket_activity ON sluice_ticket (namespace, workflow_id, activity_id);
