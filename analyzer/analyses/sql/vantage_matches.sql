-- The same message seen in two captures (vantage points): one row per message and pair
-- of captures (capture_id < other_capture_id) that both hold it.  A message is a NATS
-- operation (`nats` and `nats_cluster` rows) identified by its connection (src/dst
-- address and port: the same TCP connection seen at both points, so no NAT between
-- them), direction, op, subject, payload SHA-256 and occurrence (the how-many-th time
-- that combination appears on that connection in that capture, in capture order).  A
-- capture that missed an earlier copy numbers the later ones differently, so it pairs
-- them wrongly: the spread in `clock_offsets` shows it.  diff_ns = other capture's
-- first-byte time - this capture's, both as their clocks read them.
WITH seen AS (
  SELECT capture_id, 'nats' AS protocol, record_id, direction, src_ip, src_port, dst_ip,
         dst_port, op, coalesce(subject, '') AS subject,
         coalesce(payload_sha256, '') AS payload_sha256, ts_first_ns
  FROM nats
  UNION ALL
  SELECT capture_id, 'nats_cluster', record_id, direction, src_ip, src_port, dst_ip,
         dst_port, op, coalesce(subject, ''), coalesce(payload_sha256, ''), ts_first_ns
  FROM nats_cluster
),
numbered AS (
  SELECT *,
         row_number() OVER (
           PARTITION BY capture_id, protocol, src_ip, src_port, dst_ip, dst_port, direction,
                        op, subject, payload_sha256
           ORDER BY ts_first_ns, record_id) AS occurrence
  FROM seen
)
SELECT a.capture_id, b.capture_id AS other_capture_id, a.protocol, a.direction, a.src_ip,
       a.src_port, a.dst_ip, a.dst_port, a.op, a.subject, a.occurrence,
       a.record_id, b.record_id AS other_record_id, a.ts_first_ns AS ts_ns,
       b.ts_first_ns AS other_ts_ns, b.ts_first_ns - a.ts_first_ns AS diff_ns
FROM numbered a
JOIN numbered b
  ON b.capture_id > a.capture_id AND b.protocol = a.protocol
 AND b.src_ip = a.src_ip AND b.src_port = a.src_port AND b.dst_ip = a.dst_ip
 AND b.dst_port = a.dst_port AND b.direction = a.direction AND b.op = a.op
 AND b.subject = a.subject AND b.payload_sha256 = a.payload_sha256
 AND b.occurrence = a.occurrence
