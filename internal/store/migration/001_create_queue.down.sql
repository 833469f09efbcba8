DROP TABLE IF EXISTS sluice_owner;
DROP TABLE IF EXISTS sluice_fair;
DROP SEQUENCE IF EXISTS sluice_ticket_seq;
DROP TABLE IF EXISTS sluice_ticket;
DROP TABLE IF EXISTS sluice_limit;
