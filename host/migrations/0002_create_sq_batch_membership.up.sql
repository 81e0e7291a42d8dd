CREATE TABLE sq_batch_membership (
    queue    VARBINARY(1020) NOT NULL,
    state    VARBINARY(16)   NOT NULL,
    batch_id VARBINARY(1020) NOT NULL,
    PRIMARY KEY (queue, state, batch_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
