-- Clock offset of one capture relative to another, from the messages both saw
-- (`vantage_matches`): one row per pair of captures (capture_id < other_capture_id).
-- offset_ns = how far the other capture's clock reads ahead of this one's.
-- A message going one way across the path between the two vantage points has
-- diff = offset + delay, going the other way diff = offset - delay (delays >= 0), so per
-- pair of addresses seen both ways (a path) the estimate is the mean of the two
-- directions' median diffs: exact when the path's one-way delays are equal both ways
-- (what NTP assumes); unequal delays d1, d2 bias it by (d1 - d2) / 2.  offset_ns is the
-- median of the paths' estimates.  How sure: offset_min_ns / offset_max_ns bound the
-- offset by causality alone (no message arrives before it was sent: no symmetry
-- assumed), intersected over the paths; spread_ns is the largest interquartile range of
-- the diffs within one direction (jitter, or messages paired wrongly).  offset_ns outside
-- [offset_min_ns, offset_max_ns] means the delays differ by direction (the midpoint of
-- the bounds is then nearer); min > max means messages paired wrongly.  Paths seen one
-- way only give no estimate; with none seen both ways offset_ns is null.  For more than
-- two captures, each is given relative to every capture of a smaller id (the first is
-- the reference).
WITH dir AS (
  SELECT capture_id, other_capture_id, src_ip, dst_ip, count(*) AS n,
         percentile_disc(0.5) WITHIN GROUP (ORDER BY diff_ns) AS med,
         percentile_disc(0.25) WITHIN GROUP (ORDER BY diff_ns) AS q1,
         percentile_disc(0.75) WITHIN GROUP (ORDER BY diff_ns) AS q3,
         min(diff_ns) AS lo, max(diff_ns) AS hi
  FROM vantage_matches
  GROUP BY capture_id, other_capture_id, src_ip, dst_ip
),
paths AS (
  SELECT f.capture_id, f.other_capture_id,
         cast(floor((f.med + b.med) / 2) AS BIGINT) AS estimate,
         CASE WHEN f.med >= b.med THEN b.hi ELSE f.hi END AS bound_low,
         CASE WHEN f.med >= b.med THEN f.lo ELSE b.lo END AS bound_high
  FROM dir f
  JOIN dir b
    ON b.capture_id = f.capture_id AND b.other_capture_id = f.other_capture_id
   AND b.src_ip = f.dst_ip AND b.dst_ip = f.src_ip
  WHERE f.src_ip < f.dst_ip
),
per_pair AS (
  SELECT capture_id, other_capture_id, count(*) AS paths,
         percentile_disc(0.5) WITHIN GROUP (ORDER BY estimate) AS offset_ns,
         max(bound_low) AS offset_min_ns, min(bound_high) AS offset_max_ns
  FROM paths GROUP BY capture_id, other_capture_id
),
totals AS (
  SELECT capture_id, other_capture_id, cast(sum(n) AS BIGINT) AS matches,
         max(q3 - q1) AS spread_ns
  FROM dir GROUP BY capture_id, other_capture_id
)
SELECT t.capture_id, t.other_capture_id, t.matches, coalesce(p.paths, 0) AS paths,
       p.offset_ns, p.offset_min_ns, p.offset_max_ns, t.spread_ns
FROM totals t
LEFT JOIN per_pair p
  ON p.capture_id = t.capture_id AND p.other_capture_id = t.other_capture_id
