-- One row per publish that expects an ack, with the first ack after it.
-- JetStream: a request (not to $JS.API.) whose first reply is a PubAck JSON
-- {"stream":..,"seq":..} or an API error.  STAN: PubMsg (c2s) -> PubAck (s2c) by guid.
-- Liftbridge: Publish sent by a client (c2s: not the copy the server receives) with a
-- correlation_id -> Ack by correlation_id.  Pulsar: SEND -> SEND_RECEIPT / SEND_ERROR by
-- (connection, producer id, sequence id); a chunked message is one SEND per chunk.
-- Felix: a frame sent (c2s) with an ack_mode other than none -> the first frame back
-- with an ack_status (acked when `ok`, else the status is the error) by (connection,
-- request id).  `summary`'s ack health shows these counts (published, acked, errors,
-- unacked).
WITH replied AS (
  -- the reply's text through a CASE on both sides of the join: a test of the nats side
  -- alone (the JSON checks below) is pushed beneath the join by the optimizer, and so
  -- decoded and parsed every payload of the nats table (5 s of the 103 MB bulk
  -- recording's 9 s summary in DuckDB) instead of the first replies'
  SELECT r.capture_id, r.flow_id, r.request_record_id, r.request_subject,
         r.request_ts_ns, r.first_reply_record_id, r.latency_ns,
         CASE WHEN n.record_id = r.first_reply_record_id THEN payload_text(n.payload) END
           AS reply
  FROM nats_request_reply r
  JOIN nats n ON n.capture_id = r.capture_id AND n.record_id = r.first_reply_record_id
  WHERE substr(r.request_subject, 1, 8) <> '$JS.API.'
),
js AS (
  SELECT capture_id, 'jetstream' AS protocol, flow_id,
         request_record_id AS publish_record_id, request_subject AS subject,
         request_ts_ns AS publish_ts_ns, first_reply_record_id AS ack_record_id,
         get_json_object(reply, '$.stream') AS stream,
         get_json_object(reply, '$.error.description') AS error,
         try_cast(get_json_object(reply, '$.seq') AS BIGINT) AS sequence,
         latency_ns
  FROM replied
  WHERE substr(reply, 1, 1) = '{'
),
pub AS (
  SELECT capture_id, 'stan' AS protocol, flow_id, record_id, channel AS subject,
         ts_first_ns, guid AS k1, CAST(NULL AS BIGINT) AS k2, CAST(NULL AS BIGINT) AS k3
  FROM stan WHERE msg_type = 'PubMsg' AND direction = 'c2s' AND guid IS NOT NULL
  UNION ALL
  SELECT capture_id, 'liftbridge', flow_id, record_id, stream, ts_first_ns,
         correlation_id, NULL, NULL
  FROM liftbridge
  WHERE msg_type IN ('PublishRequest', 'Publish') AND direction = 'c2s'
    AND correlation_id IS NOT NULL AND correlation_id <> ''
  UNION ALL
  SELECT capture_id, 'pulsar', flow_id, record_id, topic, ts_first_ns,
         cast(flow_id AS STRING), producer_id, sequence_id
  FROM pulsar_commands WHERE command = 'SEND'
  UNION ALL
  SELECT capture_id, 'felix', flow_id, record_id, stream, ts_first_ns,
         cast(flow_id AS STRING), request_id, NULL
  FROM felix
  WHERE direction = 'c2s' AND ack_mode IS NOT NULL AND ack_mode <> 'none'
    AND request_id IS NOT NULL
),
ack AS (
  SELECT capture_id, 'stan' AS protocol, record_id, ts_last_ns,
         CASE WHEN error <> '' THEN error END AS a_error,
         guid AS k1, CAST(NULL AS BIGINT) AS k2, CAST(NULL AS BIGINT) AS k3
  FROM stan WHERE msg_type = 'PubAck' AND direction = 's2c'
  UNION ALL
  SELECT capture_id, 'liftbridge', record_id, ts_last_ns,
         CASE WHEN coalesce(ack_error, 'OK') NOT IN ('OK', '') THEN ack_error END,
         correlation_id, NULL, NULL
  FROM liftbridge
  WHERE msg_type IN ('Ack', 'PublishResponse') AND correlation_id IS NOT NULL
  UNION ALL
  SELECT capture_id, 'pulsar', record_id, ts_last_ns,
         CASE WHEN command = 'SEND_ERROR' THEN coalesce(error_code, 'SEND_ERROR') END,
         cast(flow_id AS STRING), producer_id, sequence_id
  FROM pulsar_commands WHERE command IN ('SEND_RECEIPT', 'SEND_ERROR')
  UNION ALL
  SELECT capture_id, 'felix', record_id, ts_last_ns,
         CASE WHEN ack_status <> 'ok' THEN ack_status END,
         cast(flow_id AS STRING), request_id, NULL
  FROM felix
  WHERE direction = 's2c' AND ack_status IS NOT NULL AND request_id IS NOT NULL
),
paired AS (
  SELECT p.*, a.record_id AS ack_record_id, a.ts_last_ns AS a_t, a.a_error,
         row_number() OVER (PARTITION BY p.capture_id, p.protocol, p.record_id
                            ORDER BY a.ts_last_ns, a.record_id) AS rn
  FROM pub p
  LEFT JOIN ack a
    ON a.capture_id = p.capture_id AND a.protocol = p.protocol AND a.k1 = p.k1
   AND (p.k2 IS NULL OR a.k2 = p.k2) AND (p.k3 IS NULL OR a.k3 = p.k3)
   AND a.ts_last_ns >= p.ts_first_ns
)
SELECT capture_id, protocol, flow_id, publish_record_id, subject, publish_ts_ns,
       ack_record_id, stream IS NOT NULL AS acked, error, stream, sequence, latency_ns
FROM js
WHERE stream IS NOT NULL OR error IS NOT NULL
UNION ALL
SELECT capture_id, protocol, flow_id, record_id, subject, ts_first_ns, ack_record_id,
       ack_record_id IS NOT NULL AND a_error IS NULL, a_error, CAST(NULL AS STRING),
       CAST(NULL AS BIGINT), a_t - ts_first_ns
FROM paired
WHERE rn = 1
