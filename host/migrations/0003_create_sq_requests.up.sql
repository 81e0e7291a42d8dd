CREATE TABLE sq_requests (
    queue      VARBINARY(1020) NOT NULL,
    id         VARBINARY(1020) NOT NULL,
    batch_id   VARBINARY(1020) NOT NULL,
    state      VARBINARY(16)   NOT NULL,
    version    BIGINT          NOT NULL,
    created_at DATETIME(6)     NOT NULL,
    updated_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (queue, id),
    KEY sq_requests_batch (queue, batch_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
