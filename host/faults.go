package host

import (
	"context"
	"fmt"

	"github.com/mendq/mend"
)

// sqlFaultsTable holds armed publish failures, one row per failure. It is a
// MEMORY table on purpose: the trigger consumes a row and then SIGNALs, and
// the SIGNAL rolls back every transactional change of the statement, the
// trigger's own included. On InnoDB the consumed row would come back and the
// fault would fire forever; a non-transactional delete stays done.
const sqlFaultsTable = `-- name: FaultsTable
CREATE TABLE IF NOT EXISTS sq_faults (
    topic         VARBINARY(1020) NOT NULL,
    partition_key VARBINARY(1020) NOT NULL
) ENGINE=MEMORY`

const sqlFaultTriggerExists = `-- name: FaultTriggerExists
SELECT COUNT(*) FROM information_schema.triggers
WHERE trigger_schema = DATABASE() AND trigger_name = 'sq_messages_fault'`

// sqlFaultTrigger fails an insert into sq_messages when it can consume an
// armed fault for the row's topic and partition. One statement with a
// BEGIN...END body: the driver sends it as one query, no multiStatements.
const sqlFaultTrigger = `CREATE TRIGGER sq_messages_fault BEFORE INSERT ON sq_messages FOR EACH ROW
BEGIN
    DELETE FROM sq_faults WHERE topic = NEW.topic AND partition_key = NEW.partition_key LIMIT 1;
    IF ROW_COUNT() > 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sq_messages_fault: injected publish failure (host.FailNextPublish)';
    END IF;
END`

const sqlFaultArm = `-- name: FaultArm
INSERT INTO sq_faults (topic, partition_key) VALUES (?, ?)`

// errTriggerExists is ER_TRG_ALREADY_EXISTS: another caller installed the
// trigger between our check and our CREATE.
const errTriggerExists = 1359

// FailNextPublish arms a one-shot fault in the queue database: the next
// insert into sq_messages for topic and partition fails with error 1644
// (SIGNAL SQLSTATE '45000') and writes nothing; the inserts after it succeed.
// Each call arms one more failure. It installs, once, a BEFORE INSERT trigger
// on sq_messages and a small MEMORY control table, sq_faults; both are test
// and demo machinery, not part of Migrations (the trigger goes away with
// sq_messages when the schema is reverted).
//
// The fault fires inside the server, so it hits every publisher of the
// database, not only this DB. Creating a trigger needs the TRIGGER privilege
// and, on a server with binary logging, SUPER or
// log_bin_trust_function_creators; a server enforcing GTID consistency
// refuses the mixed MEMORY/InnoDB statement.
func (d *DB) FailNextPublish(ctx context.Context, topic, partition string) error {
	if err := mend.ValidateIdentity("topic", topic, true); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("partition", partition, false); err != nil {
		return err
	}
	if _, err := d.queue.ExecContext(ctx, sqlFaultsTable); err != nil {
		return fmt.Errorf("host: fail next publish: create sq_faults: %w", translate(err))
	}
	var n int
	if err := d.queue.QueryRowContext(ctx, sqlFaultTriggerExists).Scan(&n); err != nil {
		return fmt.Errorf("host: fail next publish: %w", translate(err))
	}
	if n == 0 {
		if _, err := d.queue.ExecContext(ctx, sqlFaultTrigger); err != nil && errNumber(err) != errTriggerExists {
			return fmt.Errorf("host: fail next publish: create trigger: %w", translate(err))
		}
	}
	if _, err := d.queue.ExecContext(ctx, sqlFaultArm, topic, partition); err != nil {
		return fmt.Errorf("host: fail next publish: arm: %w", translate(err))
	}
	return nil
}
