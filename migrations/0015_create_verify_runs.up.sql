-- One row per `mend verify` run (issue 46): when it ran, what it covered, what it found, so mend console's overview
-- shows the last result and its age. Expand: a new table, which no older binary reads or writes. Sharded by queue
-- under Vitess as the other tables are (queue is the run's --queue, '' for a run over every queue).
CREATE TABLE mend_verify_runs (
    run_id      BINARY(16)      NOT NULL,
    queue       VARBINARY(1020) NOT NULL DEFAULT '',
    record_id   BINARY(16)      NULL,
    since_us    BIGINT          NOT NULL DEFAULT 0,
    started_at  DATETIME(6)     NOT NULL,
    finished_at DATETIME(6)     NOT NULL,
    records     BIGINT          NOT NULL DEFAULT 0,
    events      BIGINT          NOT NULL DEFAULT 0,
    divergent   BIGINT          NOT NULL DEFAULT 0,
    legacy      BIGINT          NOT NULL DEFAULT 0,
    rebuilt     BIGINT          NOT NULL DEFAULT 0,
    error       VARBINARY(2000) NOT NULL DEFAULT '',
    host        VARBINARY(255)  NOT NULL DEFAULT '',
    PRIMARY KEY (run_id),
    KEY mend_verify_runs_finished (finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
