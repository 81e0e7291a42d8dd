package sqtest

import (
	"context"
	"database/sql"
	"fmt"
)

// The application database's tables, written from the fact sheet of
// uber/submitqueue (snapshot cfeea0d9). They name a charset and no
// collation, as the real DDL does, so each table gets the server's default
// utf8mb4 collation: utf8mb4_0900_ai_ci on MySQL 8, utf8mb4_general_ci on
// MariaDB. Both are case-insensitive, which is the point: mend must stay
// byte-exact on top of them.
var appTables = []string{
	`CREATE TABLE batch (
  queue VARCHAR(255) NOT NULL,
  id VARCHAR(255) NOT NULL,
  contains JSON NOT NULL,
  dependencies JSON NOT NULL,
  state VARCHAR(255) NOT NULL,
  version INT NOT NULL,
  PRIMARY KEY (queue, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE queue_batch_state (
  queue VARCHAR(255) NOT NULL,
  state VARCHAR(255) NOT NULL,
  batch_id VARCHAR(255) NOT NULL,
  PRIMARY KEY (queue, state, batch_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE request (
  queue VARCHAR(255) NOT NULL,
  id VARCHAR(255) NOT NULL,
  change_uri JSON NOT NULL,
  land_strategy VARCHAR(64) NOT NULL,
  state VARCHAR(64) NOT NULL,
  version INT NOT NULL,
  PRIMARY KEY (queue, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE request_batch (
  queue VARCHAR(255) NOT NULL,
  request_id VARCHAR(255) NOT NULL,
  batch_id VARCHAR(255) NOT NULL,
  version INT NOT NULL,
  PRIMARY KEY (queue, request_id, batch_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE build (
  queue VARCHAR(255) NOT NULL,
  id VARCHAR(255) NOT NULL,
  batch_id VARCHAR(255) NOT NULL,
  path_id VARCHAR(255) NOT NULL,
  attempt INT NOT NULL,
  status VARCHAR(64) NOT NULL,
  PRIMARY KEY (queue, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE request_log (
  queue VARCHAR(255) NOT NULL,
  request_id VARCHAR(255) NOT NULL,
  timestamp_ms BIGINT NOT NULL,
  salt BIGINT NOT NULL,
  type VARCHAR(16) NOT NULL DEFAULT 'status',
  status VARCHAR(64) NOT NULL,
  event VARCHAR(64) NOT NULL DEFAULT '',
  request_version INT NOT NULL,
  last_error TEXT NOT NULL,
  metadata JSON NOT NULL,
  PRIMARY KEY (queue, request_id, timestamp_ms, salt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE request_summary (
  queue VARCHAR(255) NOT NULL,
  request_id VARCHAR(255) NOT NULL,
  change_uris JSON NOT NULL,
  received_at_ms BIGINT NOT NULL,
  status VARCHAR(64) NOT NULL,
  request_version INT NOT NULL,
  status_timestamp_ms BIGINT NOT NULL,
  version INT NOT NULL,
  last_error TEXT NOT NULL,
  metadata JSON NOT NULL,
  PRIMARY KEY (queue, request_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
}

// The queue database's tables. They use utf8mb4_bin: a byte compare, but
// PAD SPACE, so 'x' = 'x ' there.
var queueTables = []string{
	"CREATE TABLE queue_messages (\n" +
		"  `offset` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,\n" +
		`  topic VARCHAR(255) NOT NULL,
  partition_key VARCHAR(255) NOT NULL,
  id VARCHAR(255) NOT NULL,
  payload BLOB NOT NULL,
  metadata JSON NULL,
  created_at BIGINT UNSIGNED NOT NULL,
  published_at BIGINT UNSIGNED NOT NULL,
  failed_at BIGINT UNSIGNED NOT NULL,
  failure_count INT UNSIGNED NOT NULL,
  last_error TEXT NOT NULL,
  original_topic VARCHAR(255) NOT NULL,
  failure_detail JSON NULL,
  PRIMARY KEY (` + "`offset`" + `),
  INDEX idx_topic_partition_offset (topic, partition_key, ` + "`offset`" + `),
  UNIQUE KEY idx_topic_partition_id (topic, partition_key, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE queue_delivery_state (
  consumer_group VARCHAR(255) NOT NULL,
  topic VARCHAR(255) NOT NULL,
  partition_key VARCHAR(255) NOT NULL,
  message_offset BIGINT UNSIGNED NOT NULL,
  acked BOOL NOT NULL,
  invisible_until BIGINT UNSIGNED NOT NULL,
  retry_count INT UNSIGNED NOT NULL,
  postponed BOOL NOT NULL,
  PRIMARY KEY (consumer_group, topic, partition_key, message_offset)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE queue_offsets (
  consumer_group VARCHAR(255) NOT NULL,
  topic VARCHAR(255) NOT NULL,
  partition_key VARCHAR(255) NOT NULL,
  offset_acked BIGINT UNSIGNED NOT NULL,
  updated_at BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (consumer_group, topic, partition_key),
  INDEX idx_topic (topic)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	// The subscriber's partition leases and its heartbeats
	// (schema/queue_partition_leases.sql, queue_subscriber_heartbeats.sql):
	// times are epoch ms of the subscriber's own clock.
	`CREATE TABLE queue_partition_leases (
  consumer_group VARCHAR(255) NOT NULL,
  topic VARCHAR(255) NOT NULL,
  partition_key VARCHAR(255) NOT NULL,
  leased_by VARCHAR(255) NOT NULL,
  leased_at BIGINT UNSIGNED NOT NULL,
  lease_renewed_at BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (consumer_group, topic, partition_key),
  INDEX idx_lease_renewed (lease_renewed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE queue_subscriber_heartbeats (
  consumer_group VARCHAR(255) NOT NULL,
  topic VARCHAR(255) NOT NULL,
  subscriber_name VARCHAR(255) NOT NULL,
  heartbeat_at BIGINT UNSIGNED NOT NULL,
  deregistered_at BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (consumer_group, topic, subscriber_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
}

// AppTables and QueueTables name the tables CreateApp and CreateQueue make.
var (
	AppTables   = []string{"batch", "queue_batch_state", "request", "request_batch", "build", "request_log", "request_summary"}
	QueueTables = []string{"queue_messages", "queue_delivery_state", "queue_offsets", "queue_partition_leases", "queue_subscriber_heartbeats"}
)

// CreateApp creates the application database's tables in the database db
// is connected to. It is for tests and the demo: mend never creates or
// migrates a real host's tables.
func CreateApp(ctx context.Context, db *sql.DB) error { return exec(ctx, db, appTables) }

// CreateQueue creates the queue database's tables in the database db is
// connected to.
func CreateQueue(ctx context.Context, db *sql.DB) error { return exec(ctx, db, queueTables) }

// Apply creates both sets of tables in the database dsn names: the shape of
// mysqltest.Migrator, for tests that keep the two databases in one.
func Apply(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("sqtest: open: %w", err)
	}
	defer db.Close()
	if err := CreateApp(ctx, db); err != nil {
		return err
	}
	return CreateQueue(ctx, db)
}

func exec(ctx context.Context, db *sql.DB, stmts []string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("sqtest: %.40s...: %w", s, err)
		}
	}
	return nil
}
