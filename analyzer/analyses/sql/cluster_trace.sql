-- End-to-end trace of client publishes across a NATS cluster: one row per hop of each
-- PUB/HPUB a client sent (c2s): the route RMSG / leaf LMSG / HMSG copies between servers
-- (nats_cluster rows) and the client MSG/HMSG deliveries.  A hop belongs to the most
-- recent publish of the same capture with the same subject and payload SHA-256 at most
-- {{delivery_window_ns}} ns before the hop's first byte (the `deliveries` rule; client
-- deliveries are taken from `deliveries`).  hop_ns = hop's first byte - publish's first
-- byte; hop_index orders a publish's hops in capture time.  Only publishes that crossed
-- a server link are listed; a gateway's `_GR_.` reply prefix is taken off the hop's
-- subject.
WITH pubs AS (
  SELECT capture_id, subject, payload_sha256, 0 AS kind, ts_first_ns AS t, record_id AS rid,
         flow_id AS fid, CAST(NULL AS STRING) AS op, CAST(NULL AS STRING) AS link
  FROM nats
  WHERE op IN ('PUB', 'HPUB') AND direction = 'c2s'
    AND payload_sha256 IS NOT NULL AND subject IS NOT NULL
),
hops AS (
  -- a reply crossing a gateway travels to `_GR_.<cluster hash>.<server hash>.<reply>`:
  -- the hop is matched on the subject its publisher used
  SELECT capture_id, regexp_replace(subject, '^_GR_[.][^.]+[.][^.]+[.]', '') AS subject,
         payload_sha256, 1 AS kind, ts_first_ns AS t,
         record_id AS rid, flow_id AS fid, op, link
  FROM nats_cluster
  WHERE op IN ('RMSG', 'LMSG', 'HMSG') AND payload_sha256 IS NOT NULL
),
ordered AS (
  SELECT *,
         max(CASE WHEN kind = 0 THEN t END) OVER (
           PARTITION BY capture_id, subject, payload_sha256 ORDER BY t, kind, rid
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS pub_t
  FROM (SELECT * FROM pubs UNION ALL SELECT * FROM hops) u
),
pub_at AS (
  SELECT capture_id, subject, payload_sha256, t, max(rid) AS rid
  FROM pubs GROUP BY capture_id, subject, payload_sha256, t
),
server_hops AS (
  SELECT o.capture_id, p.rid AS pub_record_id, o.pub_t AS pub_ts_ns, o.subject,
         o.link || ' ' || o.op AS hop, o.rid AS hop_record_id, o.fid AS hop_flow_id,
         o.t AS hop_ts_ns
  FROM ordered o
  JOIN pub_at p
    ON p.capture_id = o.capture_id AND p.subject = o.subject
   AND p.payload_sha256 = o.payload_sha256 AND p.t = o.pub_t
  WHERE o.kind = 1 AND o.t - o.pub_t <= {{delivery_window_ns}}
),
all_hops AS (
  SELECT * FROM server_hops
  UNION ALL
  SELECT capture_id, pub_record_id, pub_ts_ns, subject, 'client delivery',
         delivery_record_id, delivery_flow_id, delivery_ts_ns
  FROM deliveries
  WHERE protocol = 'nats' AND pub_record_id IS NOT NULL
)
SELECT h.capture_id, h.pub_record_id, n.flow_id AS pub_flow_id, h.subject, h.pub_ts_ns,
       row_number() OVER (PARTITION BY h.capture_id, h.pub_record_id
                          ORDER BY h.hop_ts_ns, h.hop_record_id) AS hop_index,
       h.hop, h.hop_record_id, h.hop_flow_id, h.hop_ts_ns,
       h.hop_ts_ns - h.pub_ts_ns AS hop_ns
FROM all_hops h
JOIN nats n ON n.capture_id = h.capture_id AND n.record_id = h.pub_record_id
JOIN (SELECT DISTINCT capture_id, pub_record_id FROM server_hops) x
  ON x.capture_id = h.capture_id AND x.pub_record_id = h.pub_record_id
