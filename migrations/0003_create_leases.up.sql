CREATE TABLE mend_leases (
    queue       VARBINARY(1020) NOT NULL,
    holder      VARBINARY(255)  NOT NULL,
    epoch       BIGINT          NOT NULL,
    acquired_at DATETIME(6)     NOT NULL,
    renewed_at  DATETIME(6)     NOT NULL,
    expires_at  DATETIME(6)     NOT NULL,
    transitions BIGINT          NOT NULL DEFAULT 0,
    PRIMARY KEY (queue)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
