-- Statements that change tickets' states check what they changed: a ticket not in the state the
-- statement expects fails the statement, and so its transaction, with a message naming the tickets,
-- rather than being skipped. sluice_fail raises that error (SQLSTATE SL001) from inside a statement.
CREATE FUNCTION sluice_fail(message text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = message, ERRCODE = 'SL001';
END
$$;
