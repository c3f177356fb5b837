-- Consumer lag over time, as the wire shows it: one row per JetStream delivery whose
-- reply subject is $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
-- (the v2 form has <domain>.<account hash> before <stream>): pending = messages of the
-- stream still to be delivered to that consumer when this one was sent.
WITH js AS (
  SELECT capture_id, flow_id, record_id, ts_first_ns, reply_to AS r,
         CASE WHEN length(reply_to) - length(replace(reply_to, '.', '')) + 1 >= 12
              THEN 4 ELSE 2 END AS o
  FROM nats
  WHERE op IN ('MSG', 'HMSG') AND direction = 's2c' AND substr(reply_to, 1, 8) = '$JS.ACK.'
)
SELECT capture_id, 'jetstream' AS protocol, flow_id, record_id AS delivery_record_id,
       ts_first_ns AS ts_ns, split_part(r, '.', o + 1) AS stream,
       split_part(r, '.', o + 2) AS consumer,
       try_cast(split_part(r, '.', o + 3) AS BIGINT) AS delivered_count,
       try_cast(split_part(r, '.', o + 4) AS BIGINT) AS stream_seq,
       try_cast(split_part(r, '.', o + 5) AS BIGINT) AS consumer_seq,
       try_cast(split_part(r, '.', o + 7) AS BIGINT) AS pending
FROM js
