-- One row per NATS connection that named itself: (capture_id, flow_id, client_name) from
-- the first CONNECT with a `name`.
SELECT capture_id, flow_id, client_name
FROM (
  SELECT capture_id, flow_id, client_name,
         row_number() OVER (PARTITION BY capture_id, flow_id ORDER BY record_id) AS rn
  FROM nats
  WHERE op = 'CONNECT' AND client_name IS NOT NULL
) named
WHERE rn = 1
