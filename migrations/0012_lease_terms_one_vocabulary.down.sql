CREATE OR REPLACE SQL SECURITY INVOKER VIEW mend_lease_terms AS
SELECT
    CONVERT(h.queue USING utf8mb4) COLLATE utf8mb4_bin                          AS queue,
    h.epoch                                                                     AS epoch,
    CONVERT(h.holder USING utf8mb4) COLLATE utf8mb4_bin                         AS holder,
    h.acquired_at                                                               AS acquired_at,
    CASE
        WHEN h.ended_at IS NOT NULL THEN h.ended_how
        WHEN l.epoch = h.epoch AND l.expires_at > UTC_TIMESTAMP(6) THEN 'current'
        ELSE 'expired'
    END                                                                         AS ended_how,
    CASE
        WHEN h.ended_at IS NOT NULL THEN h.ended_at
        WHEN l.epoch = h.epoch AND l.expires_at <= UTC_TIMESTAMP(6) THEN l.expires_at
    END                                                                         AS ended_at
FROM mend_lease_history h
LEFT JOIN mend_leases l ON l.queue = h.queue
