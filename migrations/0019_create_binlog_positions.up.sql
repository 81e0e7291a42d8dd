-- Where mend's binary-log reader (issue 44, package binlog) has recorded the queue database's dead letters up to: one
-- row per queue database it reads (name: the reader's lease, "mend-binlog/<source>", so under Vitess the row and the
-- lease that fences its writes are on one shard). A row is written only after the dead letters before its position
-- are durable in mend_records, and only by the current holder of that lease (epoch). gtid_set is the position where
-- the server has GTIDs (MariaDB always; MySQL with gtid_mode=ON); binlog_file and binlog_pos otherwise, valid only on
-- the server whose server_uuid (MySQL) or server_id they were read from. event_at is the commit time of the last
-- transaction read (the lag shown beside the server's retention); reset_reason and reset_at say why and when the
-- position was last started over from the tables (first start, a purged position, a failover without GTIDs).
-- Expand: a new table, which no older binary reads or writes.
CREATE TABLE mend_binlog_positions (
    name         VARBINARY(1020) NOT NULL,
    flavor       VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    server_uuid  VARBINARY(255)  NOT NULL DEFAULT '',
    binlog_file  VARBINARY(512)  NOT NULL DEFAULT '',
    binlog_pos   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    gtid_set     MEDIUMBLOB      NOT NULL,
    event_at     DATETIME(6)     NULL,
    epoch        BIGINT          NOT NULL DEFAULT 0,
    holder       VARBINARY(1020) NOT NULL DEFAULT '',
    reset_reason VARBINARY(2000) NOT NULL DEFAULT '',
    reset_at     DATETIME(6)     NULL,
    updated_at   DATETIME(6)     NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
