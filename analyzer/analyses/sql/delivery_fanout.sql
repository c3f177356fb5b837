-- One row per NATS PUB/HPUB sent by a client: the deliveries the `deliveries` analysis
-- matched to it (distinct subscriptions = (connection, sid), connections, first and last
-- delivery latency); delivered = false for a message nobody received.
WITH m AS (
  SELECT capture_id, pub_record_id,
         count(*) AS deliveries,
         count(DISTINCT concat_ws('|', cast(delivery_flow_id AS STRING), sid)) AS subscriptions,
         count(DISTINCT delivery_flow_id) AS connections,
         min(latency_ns) AS first_latency_ns, max(latency_ns) AS last_latency_ns
  FROM deliveries
  WHERE protocol = 'nats' AND pub_record_id IS NOT NULL
  GROUP BY capture_id, pub_record_id
)
SELECT n.capture_id, n.flow_id, n.record_id, n.op, n.subject, n.payload_sha256,
       n.payload_len, n.ts_first_ns AS ts_ns,
       cast(coalesce(m.deliveries, 0) AS BIGINT) AS deliveries,
       cast(coalesce(m.subscriptions, 0) AS BIGINT) AS subscriptions,
       cast(coalesce(m.connections, 0) AS BIGINT) AS connections,
       m.first_latency_ns, m.last_latency_ns,
       coalesce(m.deliveries, 0) > 0 AS delivered,
       c.client_name
FROM nats n
LEFT JOIN m ON m.capture_id = n.capture_id AND m.pub_record_id = n.record_id
LEFT JOIN nats_clients c ON c.capture_id = n.capture_id AND c.flow_id = n.flow_id
WHERE n.op IN ('PUB', 'HPUB') AND n.direction = 'c2s'
