-- Latency percentiles (discrete: the smallest value with at least that fraction of
-- values at or below it) per (capture, kind, protocol, subject) and per (capture, kind,
-- protocol, client); kind is request_reply (first reply's last byte - request's first
-- byte), publish_delivery (delivery's last byte - publish's first byte) or publish_ack
-- (ack's last byte - publish's first byte).  `per` says which grouping a row is;
-- `name` is the subject/topic or the client (CONNECT name, else the connection's flow id).
WITH lat AS (
  SELECT r.capture_id, 'request_reply' AS kind, 'nats' AS protocol,
         r.request_subject AS subject,
         coalesce(r.client_name, 'flow ' || cast(r.flow_id AS STRING)) AS client,
         r.latency_ns
  FROM nats_request_reply r WHERE r.answered AND r.latency_ns IS NOT NULL
  UNION ALL
  SELECT d.capture_id, 'publish_delivery', d.protocol, d.subject,
         coalesce(c.client_name, 'flow ' || cast(d.delivery_flow_id AS STRING)), d.latency_ns
  FROM deliveries d
  LEFT JOIN nats_clients c ON c.capture_id = d.capture_id AND c.flow_id = d.delivery_flow_id
  WHERE d.latency_ns IS NOT NULL
  UNION ALL
  SELECT a.capture_id, 'publish_ack', a.protocol, a.subject,
         coalesce(c.client_name, 'flow ' || cast(a.flow_id AS STRING)), a.latency_ns
  FROM publish_ack_latency a
  LEFT JOIN nats_clients c ON c.capture_id = a.capture_id AND c.flow_id = a.flow_id
  WHERE a.latency_ns IS NOT NULL
),
-- each latency once per grouping: one pass over `lat` (a UNION of three SELECTs from it
-- made Spark plan and run `lat`, with its joins, three times)
keyed AS (
  SELECT capture_id, kind, protocol, g.per,
         CASE g.per WHEN 'subject' THEN coalesce(subject, '')
                    WHEN 'client' THEN client ELSE '*' END AS name,
         latency_ns
  FROM lat CROSS JOIN (VALUES ('subject'), ('client'), ('all')) AS g(per)
)
SELECT capture_id, kind, protocol, per, name, count(*) AS count,
       min(latency_ns) AS min_ns,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY latency_ns) AS p50_ns,
       percentile_disc(0.9) WITHIN GROUP (ORDER BY latency_ns) AS p90_ns,
       percentile_disc(0.99) WITHIN GROUP (ORDER BY latency_ns) AS p99_ns,
       max(latency_ns) AS max_ns
FROM keyed
GROUP BY capture_id, kind, protocol, per, name
