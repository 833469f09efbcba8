-- What reported usage gave back, per key and second: the refunds folded in that second, of input and of
-- output tokens (negative: usage above the reservation). tokens, input_tokens and output_tokens stay net
-- of them, as before; with these a reader can tell the reservations from the refunds. Explain takes
-- from them the share of a reservation that comes back when a ticket ends, so that its estimate does
-- not have the line advance at the pace of the reservations when the calls use less. Adding a column
-- with a constant default rewrites nothing.
ALTER TABLE sluice_usage
    ADD COLUMN returned_input  bigint NOT NULL DEFAULT 0,
    ADD COLUMN returned_output bigint NOT NULL DEFAULT 0;
