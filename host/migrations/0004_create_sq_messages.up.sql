CREATE TABLE sq_messages (
    `offset`      BIGINT          NOT NULL AUTO_INCREMENT,
    topic         VARBINARY(1020) NOT NULL,
    partition_key VARBINARY(1020) NOT NULL,
    id            VARBINARY(1020) NOT NULL,
    payload       BLOB            NOT NULL,
    metadata      JSON            NOT NULL,
    failure_count INT             NOT NULL DEFAULT 0,
    last_error    BLOB            NOT NULL,
    failed_at     DATETIME(6)     NULL,
    created_at    DATETIME(6)     NOT NULL,
    PRIMARY KEY (`offset`),
    UNIQUE KEY sq_messages_dedupe (topic, partition_key, id),
    KEY sq_messages_partition (topic, partition_key, `offset`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin ROW_FORMAT=DYNAMIC
