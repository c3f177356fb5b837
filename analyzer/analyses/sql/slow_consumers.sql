-- Deliveries pending vs acked, per consumer connection: JetStream deliveries (reply
-- subject $JS.ACK...) and the PUB to that subject on the same connection that acks
-- each; STAN MsgProto and the subscriber's Ack (channel, sequence) on the same
-- connection; Pulsar MESSAGE entries and the ACKs of that consumer id on the same
-- connection (an Individual ack names each message id, a Cumulative ack covers every
-- entry up to its id).  unacked = delivered - acked; max_unacked = the most deliveries
-- waiting for their ack at any moment (counted at each delivery and ack, in capture
-- order); ack_p50_ns / ack_max_ns: delivery's first byte -> ack's first byte.
-- Each delivery pairs with the first matching ack after it, so a redelivered copy acked
-- once counts both copies as acked.  JetStream consumer = <stream>/<consumer> of the
-- short (v1) ack subject form; STAN: the channel; Pulsar: <topic> <subscription>.
-- `summary`'s ack health shows these counts (delivered, acked, unacked per protocol).
WITH dl AS (
  SELECT capture_id, 'jetstream' AS protocol, flow_id, reply_to AS k,
         split_part(reply_to, '.', 3) || '/' || split_part(reply_to, '.', 4) AS consumer,
         ts_first_ns AS t, record_id AS rid, CAST(NULL AS BIGINT) AS cid,
         CAST(NULL AS BIGINT) AS ledger, CAST(NULL AS BIGINT) AS entry
  FROM nats
  WHERE op IN ('MSG', 'HMSG') AND direction = 's2c' AND substr(reply_to, 1, 8) = '$JS.ACK.'
  UNION ALL
  SELECT capture_id, 'stan', flow_id, channel || '#' || cast(sequence AS STRING),
         channel, ts_first_ns, record_id, NULL, NULL, NULL
  FROM stan WHERE msg_type = 'MsgProto' AND direction = 's2c' AND sequence IS NOT NULL
  UNION ALL
  SELECT capture_id, 'pulsar', flow_id,
         cast(consumer_id AS STRING) || ':' || cast(ledger_id AS STRING) || ':'
           || cast(entry_id AS STRING),
         coalesce(topic, '') || ' ' || coalesce(subscription, ''), ts_first_ns, record_id,
         consumer_id, ledger_id, entry_id
  FROM pulsar_commands
  WHERE command = 'MESSAGE' AND direction = 's2c' AND consumer_id IS NOT NULL
    AND entry_id IS NOT NULL
),
pulsar_acks AS (
  SELECT capture_id, flow_id, consumer_id, ack_type, ts_first_ns AS t, record_id AS rid,
         explode(message_ids) AS m
  FROM pulsar_commands
  WHERE command = 'ACK' AND direction = 'c2s' AND consumer_id IS NOT NULL
),
ack AS (
  SELECT capture_id, 'jetstream' AS protocol, flow_id, subject AS k, ts_first_ns AS t,
         record_id AS rid
  FROM nats
  WHERE op IN ('PUB', 'HPUB') AND direction = 'c2s' AND substr(subject, 1, 8) = '$JS.ACK.'
  UNION ALL
  SELECT capture_id, 'stan', flow_id, channel || '#' || cast(sequence AS STRING),
         ts_first_ns, record_id
  FROM stan WHERE msg_type = 'Ack' AND direction = 'c2s' AND sequence IS NOT NULL
  UNION ALL
  SELECT capture_id, 'pulsar', flow_id,
         cast(consumer_id AS STRING) || ':' || cast(m.ledger_id AS STRING) || ':'
           || cast(m.entry_id AS STRING), t, rid
  FROM pulsar_acks WHERE ack_type IS NULL OR ack_type <> 'Cumulative'
),
candidates AS (
  SELECT d.capture_id, d.protocol, d.rid, a.t AS a_t, a.rid AS a_rid
  FROM dl d
  JOIN ack a
    ON a.capture_id = d.capture_id AND a.protocol = d.protocol AND a.flow_id = d.flow_id
   AND a.k = d.k AND a.t >= d.t
  UNION ALL
  SELECT d.capture_id, d.protocol, d.rid, c.t, c.rid
  FROM dl d
  JOIN pulsar_acks c
    ON d.protocol = 'pulsar' AND c.ack_type = 'Cumulative' AND c.capture_id = d.capture_id
   AND c.flow_id = d.flow_id AND c.consumer_id = d.cid AND c.t >= d.t
   AND (c.m.ledger_id > d.ledger OR (c.m.ledger_id = d.ledger AND c.m.entry_id >= d.entry))
),
ranked AS (
  SELECT *, row_number() OVER (PARTITION BY capture_id, protocol, rid
                               ORDER BY a_t, a_rid) AS rn
  FROM candidates
),
firsts AS (
  SELECT d.*, r.a_t, r.a_rid
  FROM dl d
  LEFT JOIN ranked r
    ON r.capture_id = d.capture_id AND r.protocol = d.protocol AND r.rid = d.rid
   AND r.rn = 1
),
events AS (
  SELECT capture_id, protocol, flow_id, consumer, t, rid, 1 AS delta FROM firsts
  UNION ALL
  SELECT capture_id, protocol, flow_id, consumer, a_t, a_rid, -1 FROM firsts
  WHERE a_t IS NOT NULL
),
level AS (
  SELECT capture_id, protocol, flow_id, consumer,
         sum(delta) OVER (PARTITION BY capture_id, protocol, flow_id, consumer
                          ORDER BY t, delta DESC, rid
                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS waiting
  FROM events
),
peak AS (
  SELECT capture_id, protocol, flow_id, consumer, max(waiting) AS max_unacked
  FROM level GROUP BY capture_id, protocol, flow_id, consumer
)
SELECT f.capture_id, f.protocol, f.flow_id, f.consumer,
       count(*) AS delivered, count(f.a_t) AS acked, count(*) - count(f.a_t) AS unacked,
       cast(max(p.max_unacked) AS BIGINT) AS max_unacked,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY f.a_t - f.t) AS ack_p50_ns,
       max(f.a_t - f.t) AS ack_max_ns,
       max(c.client_name) AS client_name
FROM firsts f
JOIN peak p ON p.capture_id = f.capture_id AND p.protocol = f.protocol
 AND p.flow_id = f.flow_id AND p.consumer = f.consumer
LEFT JOIN nats_clients c ON c.capture_id = f.capture_id AND c.flow_id = f.flow_id
GROUP BY f.capture_id, f.protocol, f.flow_id, f.consumer
