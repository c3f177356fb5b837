-- NATS messages and payload bytes per subject per {{rate_window_ns}} ns window (windows
-- aligned on the Unix epoch), published (PUB/HPUB) and delivered (MSG/HMSG).
SELECT capture_id,
       ts_first_ns - ts_first_ns % {{rate_window_ns}} AS window_start_ns,
       ts_first_ns - ts_first_ns % {{rate_window_ns}} + {{rate_window_ns}} AS window_end_ns,
       subject,
       cast(sum(CASE WHEN op IN ('PUB', 'HPUB') THEN 1 ELSE 0 END) AS BIGINT) AS published,
       cast(sum(CASE WHEN op IN ('MSG', 'HMSG') THEN 1 ELSE 0 END) AS BIGINT) AS delivered,
       cast(sum(CASE WHEN op IN ('PUB', 'HPUB') THEN coalesce(payload_len, 0) ELSE 0 END)
            AS BIGINT) AS published_bytes,
       cast(sum(CASE WHEN op IN ('MSG', 'HMSG') THEN coalesce(payload_len, 0) ELSE 0 END)
            AS BIGINT) AS delivered_bytes
FROM nats
WHERE op IN ('PUB', 'HPUB', 'MSG', 'HMSG')
GROUP BY capture_id, ts_first_ns - ts_first_ns % {{rate_window_ns}}, subject
