-- Consumer lag over time, as the wire shows it: one row per delivery, with `pending` =
-- messages still to be delivered to that consumer when this one was sent.
--   jetstream: deliveries whose reply subject is
--     $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (the v2 form
--     has <domain>.<account hash> before <stream>): the server's own pending count.
--   pulsar: MESSAGE entries (stream = topic, consumer = subscription, stream_seq = entry
--     id, delivered_count = redelivery_count + 1); pending = entries of that topic the
--     broker had confirmed (SEND_RECEIPT seen at or before the delivery's first byte)
--     with a later (ledger, entry) id: the backlog behind this entry.  Null when the
--     capture holds no receipt for the topic (its producers were not captured).
--   stan: MsgProto deliveries (stream = channel, consumer = subscription inbox, the
--     carrying MSG's subject; stream_seq = sequence; delivered_count 2 when redelivered,
--     or redelivery_count + 1); pending = the highest sequence of the channel delivered
--     on any connection up to this delivery minus this one's: a lower bound (the wire
--     shows no channel head: STAN's PubAck carries no sequence).
-- consumer_seq is JetStream's own; null for the others.
WITH js AS (
  SELECT capture_id, flow_id, record_id, ts_first_ns, reply_to AS r,
         CASE WHEN length(reply_to) - length(replace(reply_to, '.', '')) + 1 >= 12
              THEN 4 ELSE 2 END AS o
  FROM nats
  WHERE op IN ('MSG', 'HMSG') AND direction = 's2c' AND substr(reply_to, 1, 8) = '$JS.ACK.'
),
js_lag AS (
  SELECT capture_id, 'jetstream' AS protocol, flow_id, record_id AS delivery_record_id,
         ts_first_ns AS ts_ns, split_part(r, '.', o + 1) AS stream,
         split_part(r, '.', o + 2) AS consumer,
         try_cast(split_part(r, '.', o + 3) AS BIGINT) AS delivered_count,
         try_cast(split_part(r, '.', o + 4) AS BIGINT) AS stream_seq,
         try_cast(split_part(r, '.', o + 5) AS BIGINT) AS consumer_seq,
         try_cast(split_part(r, '.', o + 7) AS BIGINT) AS pending
  FROM js
),
pulsar_dl AS (
  SELECT capture_id, flow_id, record_id, ts_first_ns, topic, subscription, ledger_id,
         entry_id, redelivery_count
  FROM pulsar_commands
  WHERE command = 'MESSAGE' AND direction = 's2c' AND entry_id IS NOT NULL
),
receipts AS (
  SELECT capture_id, topic, ledger_id, entry_id, ts_first_ns AS t
  FROM pulsar_commands
  WHERE command = 'SEND_RECEIPT' AND entry_id IS NOT NULL AND topic IS NOT NULL
),
pulsar_lag AS (
  SELECT d.capture_id, 'pulsar' AS protocol, d.flow_id, d.record_id AS delivery_record_id,
         d.ts_first_ns AS ts_ns, d.topic AS stream, d.subscription AS consumer,
         coalesce(d.redelivery_count, 0) + 1 AS delivered_count, d.entry_id AS stream_seq,
         CAST(NULL AS BIGINT) AS consumer_seq,
         CASE WHEN k.topic IS NOT NULL THEN count(h.t) END AS pending
  FROM pulsar_dl d
  LEFT JOIN (SELECT DISTINCT capture_id, topic FROM receipts) k
    ON k.capture_id = d.capture_id AND k.topic = d.topic
  LEFT JOIN receipts h
    ON h.capture_id = d.capture_id AND h.topic = d.topic AND h.t <= d.ts_first_ns
   AND (h.ledger_id > d.ledger_id OR (h.ledger_id = d.ledger_id AND h.entry_id > d.entry_id))
  GROUP BY d.capture_id, d.flow_id, d.record_id, d.ts_first_ns, d.topic, d.subscription,
           d.redelivery_count, d.entry_id, k.topic
),
stan_dl AS (
  SELECT s.capture_id, s.flow_id, s.record_id, s.ts_first_ns, s.channel,
         coalesce(n.subject, s.channel) AS consumer, s.sequence,
         CASE WHEN s.redelivered AND coalesce(s.redelivery_count, 0) = 0 THEN 2
              ELSE coalesce(s.redelivery_count, 0) + 1 END AS delivered_count
  FROM stan s
  LEFT JOIN nats n ON n.capture_id = s.capture_id AND n.record_id = s.parent_record_id
  WHERE s.msg_type = 'MsgProto' AND s.direction = 's2c' AND s.sequence IS NOT NULL
),
stan_lag AS (
  SELECT capture_id, 'stan' AS protocol, flow_id, record_id AS delivery_record_id,
         ts_first_ns AS ts_ns, channel AS stream, consumer, delivered_count,
         sequence AS stream_seq, CAST(NULL AS BIGINT) AS consumer_seq,
         max(sequence) OVER (PARTITION BY capture_id, channel ORDER BY ts_first_ns, record_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
           - sequence AS pending
  FROM stan_dl
)
SELECT * FROM js_lag
UNION ALL
SELECT * FROM pulsar_lag
UNION ALL
SELECT * FROM stan_lag
