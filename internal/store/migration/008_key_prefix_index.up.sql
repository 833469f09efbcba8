-- The dashboard's overview filters the limits by a key prefix, at 10,000 keys and more. The primary
-- key's index orders keys in the database's collation, where a prefix is not a range; this one orders
-- them byte-wise (text_pattern_ops), where the keys that start with p are exactly those from p to p
-- followed by U+10FFFF (which no printable key holds), so the filter reads only the keys it keeps.
-- key is never updated: the admission's updates of a limit row stay HOT. The build takes the table's
-- write lock for as long as it reads the limit rows, a few milliseconds at 10,000 keys.
CREATE INDEX sluice_limit_key_prefix ON sluice_limit (key text_pattern_ops);
