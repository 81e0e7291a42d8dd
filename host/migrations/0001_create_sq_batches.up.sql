CREATE TABLE sq_batches (
    queue      VARBINARY(1020) NOT NULL,
    id         VARBINARY(1020) NOT NULL,
    state      VARBINARY(16)   NOT NULL,
    version    BIGINT          NOT NULL,
    requests   JSON            NOT NULL,
    created_at DATETIME(6)     NOT NULL,
    updated_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (queue, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
