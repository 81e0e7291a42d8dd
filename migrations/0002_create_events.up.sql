CREATE TABLE mend_events (
    record_id  BINARY(16)      NOT NULL,
    seq        BIGINT          NOT NULL,
    queue      VARBINARY(1020) NOT NULL,
    kind       VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    epoch      BIGINT          NOT NULL,
    actor      VARBINARY(255)  NOT NULL,
    op_id      VARBINARY(64)   NOT NULL,
    data       JSON            NOT NULL,
    created_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (record_id, seq),
    UNIQUE KEY mend_events_op (queue, op_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
