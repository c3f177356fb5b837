-- One row per sequence a consumer (or a subscription's consumers together) should see
-- without holes: first/last number, messages, distinct numbers, gaps (holes between two
-- consecutive numbers seen), missing (numbers in the holes), redeliveries (a number seen
-- again, or seen once with the protocol's redelivery flag).
--   jetstream: cseq of $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq> reply
--     subjects, per (stream, consumer); redelivered when <delivered> > 1.
--   jetstream-header: Nats-Sequence headers (direct gets), per (stream, connection).
--   stan: MsgProto sequence per (channel, subscription inbox: the carrying MSG's subject); `redelivered` flag.
--   pulsar: entry ids per (topic partition, ledger), judged per subscription for Shared
--     and Key_Shared (consumers share the entries) and per consumer otherwise;
--     redelivery_count > 0.  An entry id of the same ledger seen on another topic
--     partition (a broker that shares ledgers) is not a hole.
--   liftbridge: offsets per (stream, partition) read by a connection (replication and
--     fetch responses); a re-read offset is a redelivery.
WITH js AS (
  SELECT capture_id, flow_id, reply_to AS r,
         CASE WHEN length(reply_to) - length(replace(reply_to, '.', '')) + 1 >= 12
              THEN 4 ELSE 2 END AS o
  FROM nats
  WHERE op IN ('MSG', 'HMSG') AND direction = 's2c' AND substr(reply_to, 1, 8) = '$JS.ACK.'
),
psub AS (
  SELECT capture_id, flow_id, consumer_id, topic, subscription, sub_type,
         row_number() OVER (PARTITION BY capture_id, flow_id, consumer_id
                            ORDER BY record_id DESC) AS rn
  FROM pulsar_commands WHERE command = 'SUBSCRIBE'
),
pprod AS (
  SELECT capture_id, flow_id, producer_id, topic,
         row_number() OVER (PARTITION BY capture_id, flow_id, producer_id
                            ORDER BY record_id DESC) AS rn
  FROM pulsar_commands WHERE command = 'PRODUCER'
),
pmsg AS (
  SELECT m.capture_id, m.flow_id, m.consumer_id, m.ledger_id, m.entry_id,
         coalesce(m.redelivery_count, 0) > 0 AS redelivered,
         coalesce(s.topic, '?') AS topic, s.subscription,
         coalesce(s.sub_type IN ('Shared', 'Key_Shared'), false) AS shared
  FROM pulsar_commands m
  LEFT JOIN psub s
    ON s.capture_id = m.capture_id AND s.flow_id = m.flow_id
   AND s.consumer_id = m.consumer_id AND s.rn = 1
  WHERE m.command = 'MESSAGE' AND m.entry_id IS NOT NULL
),
seqs AS (
  SELECT capture_id, 'jetstream' AS protocol, split_part(r, '.', o + 1) AS stream,
         split_part(r, '.', o + 2) AS consumer, flow_id,
         try_cast(split_part(r, '.', o + 5) AS BIGINT) AS seq,
         coalesce(try_cast(split_part(r, '.', o + 3) AS BIGINT) > 1, false) AS redelivered,
         CAST(NULL AS STRING) AS scope
  FROM js
  UNION ALL
  SELECT capture_id, 'jetstream-header',
         try_element_at(try_element_at(headers, 'Nats-Stream'), 1), '(direct)', flow_id,
         try_cast(try_element_at(try_element_at(headers, 'Nats-Sequence'), 1) AS BIGINT),
         false, NULL
  FROM nats
  WHERE op IN ('MSG', 'HMSG') AND direction = 's2c' AND headers IS NOT NULL
  UNION ALL
  SELECT s.capture_id, 'stan', s.channel, coalesce(n.subject, s.channel), s.flow_id,
         s.sequence, coalesce(s.redelivered, false), NULL
  FROM stan s
  LEFT JOIN nats n ON n.capture_id = s.capture_id AND n.record_id = s.parent_record_id
  WHERE s.msg_type = 'MsgProto' AND s.direction = 's2c' AND s.sequence IS NOT NULL
  UNION ALL
  SELECT capture_id, 'pulsar', topic || ' ledger ' || cast(ledger_id AS STRING),
         CASE WHEN shared THEN coalesce(subscription, '?')
              ELSE coalesce(subscription, '?') || ' consumer ' || cast(consumer_id AS STRING) END,
         CASE WHEN shared THEN CAST(NULL AS BIGINT) ELSE flow_id END,
         entry_id, redelivered, 'ledger ' || cast(ledger_id AS STRING)
  FROM pmsg
  UNION ALL
  SELECT e.capture_id, 'liftbridge', p.stream || ' partition ' || cast(p.partition AS STRING),
         p.msg_type, e.flow_id, e.offset, false, NULL
  FROM liftbridge_entries e
  JOIN liftbridge p ON p.capture_id = e.capture_id AND p.record_id = e.parent_record_id
  WHERE e.direction = 's2c' AND e.offset IS NOT NULL AND p.stream IS NOT NULL
),
-- numbers of a shared scope (a Pulsar ledger) known to belong to another stream
elsewhere AS (
  SELECT DISTINCT capture_id, 'ledger ' || cast(ledger_id AS STRING) AS scope,
         topic, entry_id AS seq
  FROM pmsg
  UNION
  SELECT DISTINCT r.capture_id, 'ledger ' || cast(r.ledger_id AS STRING),
         coalesce(p.topic, '?'), r.entry_id
  FROM pulsar_commands r
  LEFT JOIN pprod p
    ON p.capture_id = r.capture_id AND p.flow_id = r.flow_id
   AND p.producer_id = r.producer_id AND p.rn = 1
  WHERE r.command = 'SEND_RECEIPT' AND r.entry_id IS NOT NULL
),
firsts AS (
  SELECT capture_id, protocol, stream, consumer, flow_id, scope, seq, count(*) AS n,
         max(CASE WHEN redelivered THEN 1 ELSE 0 END) AS re
  FROM seqs WHERE seq IS NOT NULL
  GROUP BY capture_id, protocol, stream, consumer, flow_id, scope, seq
),
steps AS (
  SELECT *,
         lag(seq) OVER (PARTITION BY capture_id, protocol, stream, consumer, flow_id
                        ORDER BY seq) AS prev
  FROM firsts
),
excused AS (
  SELECT s.capture_id, s.protocol, s.stream, s.consumer, s.flow_id, s.seq,
         count(*) AS other
  FROM steps s
  JOIN elsewhere e
    ON e.capture_id = s.capture_id AND e.scope = s.scope
   AND e.topic || ' ' || e.scope <> s.stream
   AND e.seq > s.prev AND e.seq < s.seq
  GROUP BY s.capture_id, s.protocol, s.stream, s.consumer, s.flow_id, s.seq
),
holes AS (
  SELECT s.*, CASE WHEN s.prev IS NULL THEN 0
                   ELSE s.seq - s.prev - 1 - coalesce(x.other, 0) END AS hole
  FROM steps s
  LEFT JOIN excused x
    ON x.capture_id = s.capture_id AND x.protocol = s.protocol AND x.stream = s.stream
   AND x.consumer = s.consumer AND x.seq = s.seq
   AND (x.flow_id = s.flow_id OR (x.flow_id IS NULL AND s.flow_id IS NULL))
)
SELECT capture_id, protocol, stream, consumer, flow_id,
       min(seq) AS first_seq, max(seq) AS last_seq,
       cast(sum(n) AS BIGINT) AS messages, count(*) AS distinct_seqs,
       cast(sum(CASE WHEN hole > 0 THEN 1 ELSE 0 END) AS BIGINT) AS gaps,
       cast(sum(CASE WHEN hole > 0 THEN hole ELSE 0 END) AS BIGINT) AS missing,
       cast(sum(n - 1) + sum(CASE WHEN n = 1 AND re = 1 THEN 1 ELSE 0 END) AS BIGINT)
         AS redeliveries
FROM holes
GROUP BY capture_id, protocol, stream, consumer, flow_id
