package storage

// SetBeforeCommit installs a hook that runs just before COMMIT is sent.
func SetBeforeCommit(d *DB, f func(op string)) { d.beforeCommit = f }
