-- One-way network delay per hop: per pair of captures and direction of travel
-- (src_ip -> dst_ip) of the messages both saw, the delay from the vantage point that saw
-- them first (from_capture_id) to the other, each message's diff corrected by the
-- pair's `clock_offsets` offset_ns: delay = diff_ns - offset_ns when this capture saw it
-- first (the direction's median diff is at or above the offset), offset_ns - diff_ns
-- otherwise.  With the offset estimated under equal delays both ways, a path's two
-- directions have the same median delay by construction; their spread and tails
-- (p90, max) are each direction's own.  No row where the pair has no offset.
WITH med AS (
  SELECT capture_id, other_capture_id, src_ip, dst_ip,
         percentile_disc(0.5) WITHIN GROUP (ORDER BY diff_ns) AS med
  FROM vantage_matches GROUP BY capture_id, other_capture_id, src_ip, dst_ip
),
m AS (
  SELECT v.capture_id, v.other_capture_id, v.src_ip, v.dst_ip, v.diff_ns, o.offset_ns,
         g.med
  FROM vantage_matches v
  JOIN clock_offsets o
    ON o.capture_id = v.capture_id AND o.other_capture_id = v.other_capture_id
  JOIN med g
    ON g.capture_id = v.capture_id AND g.other_capture_id = v.other_capture_id
   AND g.src_ip = v.src_ip AND g.dst_ip = v.dst_ip
  WHERE o.offset_ns IS NOT NULL
),
d AS (
  SELECT capture_id, other_capture_id, src_ip, dst_ip,
         CASE WHEN med >= offset_ns THEN capture_id ELSE other_capture_id END
           AS from_capture_id,
         CASE WHEN med >= offset_ns THEN other_capture_id ELSE capture_id END
           AS to_capture_id,
         CASE WHEN med >= offset_ns THEN diff_ns - offset_ns ELSE offset_ns - diff_ns END
           AS delay_ns
  FROM m
)
SELECT capture_id, other_capture_id, src_ip, dst_ip, from_capture_id, to_capture_id,
       count(*) AS messages, min(delay_ns) AS min_ns,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY delay_ns) AS p50_ns,
       percentile_disc(0.9) WITHIN GROUP (ORDER BY delay_ns) AS p90_ns,
       max(delay_ns) AS max_ns
FROM d
GROUP BY capture_id, other_capture_id, src_ip, dst_ip, from_capture_id, to_capture_id
