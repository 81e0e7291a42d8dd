CREATE TABLE mend_lease_history (
    queue       VARBINARY(1020) NOT NULL,
    epoch       BIGINT          NOT NULL,
    holder      VARBINARY(255)  NOT NULL,
    acquired_at DATETIME(6)     NOT NULL,
    ended_at    DATETIME(6)     NULL,
    ended_how   VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    PRIMARY KEY (queue, epoch)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
