-- (capture_id, source, kind, count): NATS -ERR texts, NATS header statuses (503 = no
-- responders), anomalies by kind, flows by close reason.
SELECT capture_id, 'nats -ERR' AS source, error AS kind, count(*) AS count
FROM nats WHERE op = '-ERR' GROUP BY capture_id, error
UNION ALL
SELECT capture_id, 'nats status', cast(status_code AS STRING), count(*)
FROM nats WHERE op IN ('MSG', 'HMSG') AND status_code IS NOT NULL
GROUP BY capture_id, status_code
UNION ALL
SELECT capture_id, 'anomaly', kind, count(*) FROM anomalies GROUP BY capture_id, kind
UNION ALL
SELECT capture_id, 'flow close', close_reason, count(*) FROM flows
GROUP BY capture_id, close_reason
