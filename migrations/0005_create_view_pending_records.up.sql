CREATE OR REPLACE SQL SECURITY INVOKER VIEW mend_pending_records AS
SELECT
    LOWER(HEX(r.record_id))                                            AS record_id,
    CONVERT(r.queue USING utf8mb4) COLLATE utf8mb4_bin                 AS queue,
    r.state                                                            AS state,
    CONVERT(r.topic USING utf8mb4) COLLATE utf8mb4_bin                 AS topic,
    CONVERT(r.partition_key USING utf8mb4) COLLATE utf8mb4_bin         AS partition_key,
    CONVERT(r.message_id USING utf8mb4) COLLATE utf8mb4_bin            AS message_id,
    CONVERT(r.batch_id USING utf8mb4) COLLATE utf8mb4_bin              AS batch_id,
    r.desired_outcome                                                  AS desired_outcome,
    r.attempts                                                         AS attempts,
    CONVERT(r.last_error USING utf8mb4) COLLATE utf8mb4_bin            AS last_error,
    TIMESTAMPDIFF(SECOND, r.created_at, UTC_TIMESTAMP(6))              AS age_seconds,
    TIMESTAMPDIFF(SECOND, r.state_since, UTC_TIMESTAMP(6))             AS state_age_seconds,
    r.next_attempt_at                                                  AS next_attempt_at,
    TIMESTAMPDIFF(SECOND, r.next_attempt_at, UTC_TIMESTAMP(6))         AS overdue_seconds,
    r.epoch                                                            AS epoch,
    r.version                                                          AS version,
    r.created_at                                                       AS created_at,
    r.updated_at                                                       AS updated_at
FROM mend_records r
WHERE r.state <> 'done'
