package host

// SetAfterMembersRead sets a hook that runs between the fan-out's read of
// its members and their compare-and-set, so a test can move a request
// there as the host's own controllers might.
func SetAfterMembersRead(d *DB, f func()) { d.afterMembersRead = f }
