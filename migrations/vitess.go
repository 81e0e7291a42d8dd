package migrations

import _ "embed"

// VSchema is the Vitess vschema of a sharded keyspace holding mend's tables: mend_records,
// mend_events, mend_leases and mend_lease_history are sharded by queue (an xxhash vindex on
// the queue's bytes), so a queue's lease, records and events share a shard and every
// transaction mend runs stays on one shard. mend_schema_migrations is a reference table (a copy
// on every shard). See docs/scaling.md for how to apply it and which statements scatter.
//
//go:embed vschema.json
var VSchema []byte
