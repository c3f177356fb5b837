-- Per connection (flows table): bytes and packets both ways, NATS messages published and
-- delivered on it, its CONNECT name.
WITH counts AS (
  SELECT capture_id, flow_id,
         cast(sum(CASE WHEN op IN ('PUB', 'HPUB') THEN 1 ELSE 0 END) AS BIGINT) AS published,
         cast(sum(CASE WHEN op IN ('MSG', 'HMSG') THEN 1 ELSE 0 END) AS BIGINT) AS delivered,
         count(*) AS nats_ops
  FROM nats GROUP BY capture_id, flow_id
)
SELECT f.capture_id, f.flow_id, f.protocol, f.client_ip, f.client_port, f.server_ip,
       f.server_port, f.stream_bytes_c2s + f.stream_bytes_s2c AS bytes,
       f.stream_bytes_c2s, f.stream_bytes_s2c, f.packets_c2s + f.packets_s2c AS packets,
       c.published, c.delivered, c.nats_ops, n.client_name
FROM flows f
LEFT JOIN counts c ON c.capture_id = f.capture_id AND c.flow_id = f.flow_id
LEFT JOIN nats_clients n ON n.capture_id = f.capture_id AND n.flow_id = f.flow_id
