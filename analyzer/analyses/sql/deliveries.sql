-- One row per delivery (NATS MSG/HMSG s2c, Pulsar MESSAGE entry) with the publish it
-- belongs to, or null.  NATS: the most recent PUB/HPUB (c2s) of the same capture with the
-- same subject and payload SHA-256 at most {{delivery_window_ns}} ns before the
-- delivery's first byte.  Pulsar: the SEND with the same topic, producer name and
-- sequence id.  latency_ns = delivery ts_last_ns - publish ts_first_ns.
WITH pubs AS (
  SELECT capture_id, subject, payload_sha256, 0 AS kind, ts_first_ns AS t, record_id AS rid,
         flow_id AS fid, CAST(NULL AS STRING) AS sid, ts_last_ns AS t_last
  FROM nats
  WHERE op IN ('PUB', 'HPUB') AND direction = 'c2s'
    AND payload_sha256 IS NOT NULL AND subject IS NOT NULL
),
dels AS (
  SELECT capture_id, subject, payload_sha256, 1 AS kind, ts_first_ns AS t, record_id AS rid,
         flow_id AS fid, sid, ts_last_ns AS t_last
  FROM nats
  WHERE op IN ('MSG', 'HMSG') AND direction = 's2c'
),
ordered AS (
  SELECT *,
         max(CASE WHEN kind = 0 THEN t END) OVER (
           PARTITION BY capture_id, subject, payload_sha256 ORDER BY t, kind, rid
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS pub_t
  FROM (SELECT * FROM pubs UNION ALL SELECT * FROM dels) u
),
pub_at AS (
  SELECT capture_id, subject, payload_sha256, t, max(rid) AS rid
  FROM pubs GROUP BY capture_id, subject, payload_sha256, t
),
nats_pairs AS (
  SELECT o.capture_id, 'nats' AS protocol, o.rid AS delivery_record_id,
         o.fid AS delivery_flow_id, o.sid, o.subject, o.t AS delivery_ts_ns,
         CASE WHEN o.t - o.pub_t <= {{delivery_window_ns}} THEN p.rid END AS pub_record_id,
         CASE WHEN o.t - o.pub_t <= {{delivery_window_ns}} THEN o.pub_t END AS pub_ts_ns,
         o.t_last
  FROM ordered o
  LEFT JOIN pub_at p
    ON p.capture_id = o.capture_id AND p.subject = o.subject
   AND p.payload_sha256 = o.payload_sha256 AND p.t = o.pub_t
  WHERE o.kind = 1
),
psend AS (
  SELECT capture_id, topic, producer_name, sequence_id,
         min(ts_first_ns) AS t, min(record_id) AS rid
  FROM pulsar_messages
  WHERE command = 'SEND' AND sequence_id IS NOT NULL
  GROUP BY capture_id, topic, producer_name, sequence_id
),
pulsar_pairs AS (
  SELECT m.capture_id, 'pulsar' AS protocol, m.record_id AS delivery_record_id,
         m.flow_id AS delivery_flow_id, cast(m.consumer_id AS STRING) AS sid,
         coalesce(m.topic, '') AS subject, m.ts_first_ns AS delivery_ts_ns,
         s.rid AS pub_record_id, s.t AS pub_ts_ns, m.ts_last_ns AS t_last
  FROM pulsar_messages m
  LEFT JOIN psend s
    ON s.capture_id = m.capture_id AND s.topic = m.topic
   AND s.producer_name = m.producer_name AND s.sequence_id = m.sequence_id
  WHERE m.command = 'MESSAGE'
)
SELECT d.capture_id, d.protocol, d.delivery_record_id, d.delivery_flow_id, d.sid, d.subject,
       d.delivery_ts_ns, d.pub_record_id, p.flow_id AS pub_flow_id, d.pub_ts_ns,
       CASE WHEN d.pub_record_id IS NOT NULL
            THEN coalesce(d.t_last, d.delivery_ts_ns) - d.pub_ts_ns END AS latency_ns
FROM (SELECT * FROM nats_pairs UNION ALL SELECT * FROM pulsar_pairs) d
LEFT JOIN (
  SELECT capture_id, record_id, flow_id FROM nats WHERE op IN ('PUB', 'HPUB')
  UNION ALL
  SELECT capture_id, record_id, flow_id FROM pulsar_messages WHERE command = 'SEND'
) p ON p.capture_id = d.capture_id AND p.record_id = d.pub_record_id
