CREATE OR REPLACE SQL SECURITY INVOKER VIEW mend_lease_status AS
SELECT
    CONVERT(l.queue USING utf8mb4) COLLATE utf8mb4_bin                          AS queue,
    CASE
        WHEN l.epoch = 0 THEN 'never held'
        WHEN l.expires_at > UTC_TIMESTAMP(6) THEN 'held'
        WHEN h.ended_how = 'released' THEN 'holder released'
        WHEN h.ended_how = 'operator' THEN 'operator released'
        ELSE 'expired'
    END                                                                         AS status,
    CONVERT(l.holder USING utf8mb4) COLLATE utf8mb4_bin                         AS holder,
    l.epoch                                                                     AS epoch,
    ROUND(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) / 1000000, 3) AS seconds_left,
    l.acquired_at                                                               AS acquired_at,
    l.renewed_at                                                                AS renewed_at,
    l.expires_at                                                                AS expires_at,
    l.transitions                                                               AS transitions
FROM mend_leases l
LEFT JOIN mend_lease_history h ON h.queue = l.queue AND h.epoch = l.epoch
