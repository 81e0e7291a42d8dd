package storage

// SetBeforeCommit installs a hook that runs just before COMMIT is sent.
func SetBeforeCommit(d *DB, f func(op string)) { d.beforeCommit = f }

// The statements whose plans TestDueQueriesUseTheirIndexes checks.
const (
	SQLRecordsDue = sqlRecordsDue
	SQLQueuesDue  = sqlQueuesDue
)
