CREATE OR REPLACE SQL SECURITY INVOKER VIEW mend_record_history AS
SELECT
    LOWER(HEX(e.record_id))                                    AS record_id,
    e.seq                                                      AS seq,
    CONVERT(e.queue USING utf8mb4) COLLATE utf8mb4_bin         AS queue,
    CONVERT(r.topic USING utf8mb4) COLLATE utf8mb4_bin         AS topic,
    CONVERT(r.partition_key USING utf8mb4) COLLATE utf8mb4_bin AS partition_key,
    CONVERT(r.message_id USING utf8mb4) COLLATE utf8mb4_bin    AS message_id,
    LOWER(HEX(r.message_id))                                   AS message_id_hex,
    CONVERT(r.batch_id USING utf8mb4) COLLATE utf8mb4_bin      AS batch_id,
    e.kind                                                     AS kind,
    e.epoch                                                    AS epoch,
    CONVERT(e.actor USING utf8mb4) COLLATE utf8mb4_bin         AS actor,
    CONVERT(e.op_id USING utf8mb4) COLLATE utf8mb4_bin         AS op_id,
    e.data                                                     AS data,
    e.created_at                                               AS created_at,
    r.state                                                    AS record_state
FROM mend_events e
JOIN mend_records r ON r.record_id = e.record_id
