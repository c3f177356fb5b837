-- NATS requests that got no reply: the request, its subject, reply subject, client and
-- whether the server said no responders (status 503) instead.
SELECT capture_id, flow_id, request_record_id, request_subject, reply_subject,
       request_ts_ns, no_responders, no_responders_record_id, client_name
FROM nats_request_reply
WHERE NOT answered
