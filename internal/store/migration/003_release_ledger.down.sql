-- Fold what is pending before the ledger goes: the limit rows keep exact in-flight figures. The
-- token refunds still pending are dropped (the buckets stay as conservative as they were).
UPDATE sluice_limit l SET inflight_count = greatest(0, l.inflight_count - r.count),
    inflight_tokens = greatest(0, l.inflight_tokens - r.reserved)
FROM (SELECT key, sum(count) AS count, sum(reserved) AS reserved FROM sluice_release GROUP BY key) r
WHERE l.key = r.key;
DROP TABLE sluice_release;
