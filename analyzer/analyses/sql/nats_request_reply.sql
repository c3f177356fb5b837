-- One row per NATS request: a PUB/HPUB sent by a client (c2s) with a reply subject.
-- Its replies are the MSG/HMSG the server delivers on the requester's connection for the
-- reply subject (subject = reply subject, or a delivery on a subscription whose subject is
-- exactly the reply subject: JetStream pull requests), from the request until the next
-- request with the same reply subject on that connection.  Status 503 = no responders.
-- latency_ns = first reply's ts_last_ns - request's ts_first_ns (requester side).  On the
-- responder side, responder_pubs counts PUB/HPUB to the reply subject from other
-- connections in the same interval; first_responder_record_id / responder_flow_id: the
-- first of them.  client_name: the requester's CONNECT name.
WITH req AS (
  SELECT capture_id, flow_id, record_id AS request_record_id, subject AS request_subject,
         reply_to AS reply_subject, ts_first_ns AS request_ts_ns,
         lead(ts_first_ns) OVER (PARTITION BY capture_id, flow_id, reply_to
                                 ORDER BY ts_first_ns, record_id) AS until_ns
  FROM nats
  WHERE op IN ('PUB', 'HPUB') AND direction = 'c2s' AND reply_to IS NOT NULL
),
subs AS (
  SELECT capture_id, flow_id, subject AS sub_subject, sid AS ssid
  FROM nats WHERE op = 'SUB' AND direction = 'c2s'
),
dl AS (
  SELECT capture_id, flow_id, record_id AS d_rid, subject AS d_subject, sid AS d_sid,
         ts_first_ns AS d_first, ts_last_ns AS d_last,
         coalesce(status_code = 503, false) AS d_nr
  FROM nats WHERE op IN ('MSG', 'HMSG') AND direction = 's2c'
),
cand AS (
  SELECT r.capture_id, r.request_record_id, d.d_rid, d.d_first, d.d_last, d.d_nr,
         r.request_ts_ns, r.until_ns
  FROM req r JOIN dl d
    ON d.capture_id = r.capture_id AND d.flow_id = r.flow_id AND d.d_subject = r.reply_subject
  UNION ALL
  SELECT r.capture_id, r.request_record_id, d.d_rid, d.d_first, d.d_last, d.d_nr,
         r.request_ts_ns, r.until_ns
  FROM req r
  JOIN subs s
    ON s.capture_id = r.capture_id AND s.flow_id = r.flow_id AND s.sub_subject = r.reply_subject
  JOIN dl d
    ON d.capture_id = r.capture_id AND d.flow_id = r.flow_id AND d.d_sid = s.ssid
   AND d.d_subject <> r.reply_subject
),
inwin AS (
  SELECT *,
         row_number() OVER (PARTITION BY capture_id, request_record_id, d_nr
                            ORDER BY d_first, d_rid) AS rn
  FROM cand
  WHERE d_first >= request_ts_ns AND (until_ns IS NULL OR d_first < until_ns)
),
agg AS (
  SELECT capture_id, request_record_id,
         cast(sum(CASE WHEN d_nr THEN 0 ELSE 1 END) AS BIGINT) AS replies,
         max(CASE WHEN d_nr THEN 1 ELSE 0 END) = 1 AS nr,
         max(CASE WHEN NOT d_nr AND rn = 1 THEN d_last END) AS first_last,
         max(CASE WHEN NOT d_nr AND rn = 1 THEN d_rid END) AS first_reply_record_id,
         max(CASE WHEN d_nr AND rn = 1 THEN d_rid END) AS no_responders_record_id
  FROM inwin GROUP BY capture_id, request_record_id
),
rp AS (
  SELECT capture_id, flow_id AS r_flow, record_id AS r_rid, subject AS r_subject,
         ts_first_ns AS r_ts
  FROM nats WHERE op IN ('PUB', 'HPUB') AND direction = 'c2s'
),
resp AS (
  SELECT capture_id, request_record_id, count(*) AS responder_pubs,
         max(CASE WHEN rn = 1 THEN r_rid END) AS first_responder_record_id,
         max(CASE WHEN rn = 1 THEN r_flow END) AS responder_flow_id
  FROM (
    SELECT r.capture_id, r.request_record_id, p.r_rid, p.r_flow,
           row_number() OVER (PARTITION BY r.capture_id, r.request_record_id
                              ORDER BY p.r_ts, p.r_rid, p.r_flow) AS rn
    FROM req r JOIN rp p
      ON p.capture_id = r.capture_id AND p.r_subject = r.reply_subject
     AND p.r_flow <> r.flow_id AND p.r_ts >= r.request_ts_ns
     AND (r.until_ns IS NULL OR p.r_ts < r.until_ns)
  ) x
  GROUP BY capture_id, request_record_id
)
SELECT r.capture_id, r.flow_id, r.request_record_id, r.request_subject, r.reply_subject,
       r.request_ts_ns,
       coalesce(a.replies, 0) > 0 AS answered,
       coalesce(a.nr, false) AS no_responders,
       cast(coalesce(a.replies, 0) AS BIGINT) AS replies,
       a.first_last - r.request_ts_ns AS latency_ns,
       a.first_reply_record_id, a.no_responders_record_id,
       cast(coalesce(p.responder_pubs, 0) AS BIGINT) AS responder_pubs,
       p.first_responder_record_id, p.responder_flow_id,
       c.client_name
FROM req r
LEFT JOIN agg a ON a.capture_id = r.capture_id AND a.request_record_id = r.request_record_id
LEFT JOIN resp p ON p.capture_id = r.capture_id AND p.request_record_id = r.request_record_id
LEFT JOIN nats_clients c ON c.capture_id = r.capture_id AND c.flow_id = r.flow_id
