package sqtest

import (
	"context"
	"fmt"
)

// This file plays the rest of the real subscriber's bookkeeping
// (platform/extension/messagequeue/mysql: subscriber_heartbeat_store.go,
// partition_lease_store.go and the idle-lease release in subscriber.go),
// so tests can build the tables a quiet host leaves: every subscription
// heartbeats while it runs, whether or not its partitions hold messages,
// and a partition drained for 2 x LeaseDurationMs (60 s) loses its group's
// queue_offsets row and lease.

// DBNowMS is the queue database's clock in epoch milliseconds, at the
// resolution mend reads it (whole seconds, UNIX_TIMESTAMP()).
func (w World) DBNowMS(ctx context.Context) (int64, error) {
	var s int64
	if err := w.Queue.QueryRowContext(ctx, "SELECT CAST(UNIX_TIMESTAMP() AS SIGNED)").Scan(&s); err != nil {
		return 0, fmt.Errorf("sqtest: database clock: %w", err)
	}
	return s * 1000, nil
}

// HeartbeatAt registers or renews subscriber name of group on topic with
// the real Heartbeat statement, heartbeat_at = atMS (the subscriber's own
// clock; a live subscriber renews it every LeaseRenewalIntervalMs, 10 s).
func (w World) HeartbeatAt(ctx context.Context, group, topic, name string, atMS int64) error {
	if _, err := w.Queue.ExecContext(ctx, "INSERT INTO queue_subscriber_heartbeats (consumer_group, topic, subscriber_name, heartbeat_at, deregistered_at) VALUES (?, ?, ?, ?, 0) "+
		"ON DUPLICATE KEY UPDATE heartbeat_at = VALUES(heartbeat_at), deregistered_at = 0", group, topic, name, atMS); err != nil {
		return fmt.Errorf("sqtest: heartbeat %s/%s/%s: %w", group, topic, name, err)
	}
	return nil
}

// Heartbeat is HeartbeatAt now by the queue database's clock: a running
// subscriber.
func (w World) Heartbeat(ctx context.Context, group, topic, name string) error {
	now, err := w.DBNowMS(ctx)
	if err != nil {
		return err
	}
	return w.HeartbeatAt(ctx, group, topic, name, now)
}

// Deregister is a subscriber's clean shutdown: the real hard delete of its
// heartbeat row.
func (w World) Deregister(ctx context.Context, group, topic, name string) error {
	if _, err := w.Queue.ExecContext(ctx, "DELETE FROM queue_subscriber_heartbeats WHERE consumer_group = ? AND topic = ? AND subscriber_name = ?", group, topic, name); err != nil {
		return fmt.Errorf("sqtest: deregister %s/%s/%s: %w", group, topic, name, err)
	}
	return nil
}

// Lease takes (or renews) partition's lease for holder of group, as a
// subscriber that discovered it does before it reads it, at atMS.
func (w World) Lease(ctx context.Context, group, topic, partition, holder string, atMS int64) error {
	if _, err := w.Queue.ExecContext(ctx, "INSERT INTO queue_partition_leases (consumer_group, topic, partition_key, leased_by, leased_at, lease_renewed_at) VALUES (?, ?, ?, ?, ?, ?) "+
		"ON DUPLICATE KEY UPDATE leased_by = VALUES(leased_by), lease_renewed_at = VALUES(lease_renewed_at)", group, topic, partition, holder, atMS, atMS); err != nil {
		return fmt.Errorf("sqtest: lease %s/%s/%s: %w", group, topic, partition, err)
	}
	return nil
}

// ReleaseIdle is the real idle-lease release of a drained partition: the
// group's queue_offsets row first, then its lease row (whoever holds it).
func (w World) ReleaseIdle(ctx context.Context, group, topic, partition string) error {
	if _, err := w.Queue.ExecContext(ctx, "DELETE FROM queue_offsets WHERE consumer_group = ? AND topic = ? AND partition_key = ?", group, topic, partition); err != nil {
		return fmt.Errorf("sqtest: release %s/%s/%s: %w", group, topic, partition, err)
	}
	if _, err := w.Queue.ExecContext(ctx, "DELETE FROM queue_partition_leases WHERE consumer_group = ? AND topic = ? AND partition_key = ?", group, topic, partition); err != nil {
		return fmt.Errorf("sqtest: release %s/%s/%s: %w", group, topic, partition, err)
	}
	return nil
}

// Quiet is the host after a quiet spell of more than 2 x LeaseDurationMs:
// every consumer group except those in keep has released every partition
// (no queue_offsets or lease rows left). Heartbeats are untouched: the
// subscribers still run.
func (w World) Quiet(ctx context.Context, keep ...string) error {
	rows, err := w.Queue.QueryContext(ctx, "SELECT consumer_group, topic, partition_key FROM queue_offsets UNION SELECT consumer_group, topic, partition_key FROM queue_partition_leases")
	if err != nil {
		return fmt.Errorf("sqtest: quiet: %w", err)
	}
	var rel [][3]string
	for rows.Next() {
		var r [3]string
		if err := rows.Scan(&r[0], &r[1], &r[2]); err != nil {
			rows.Close()
			return err
		}
		rel = append(rel, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range rel {
		skip := false
		for _, k := range keep {
			skip = skip || r[0] == k
		}
		if skip {
			continue
		}
		if err := w.ReleaseIdle(ctx, r[0], r[1], r[2]); err != nil {
			return err
		}
	}
	return nil
}
