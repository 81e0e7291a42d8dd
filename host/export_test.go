package host

// SetAfterMembersRead sets a hook that runs between the fan-out's read of
// its members and their compare-and-set, so a test can move a request
// there as the host's own controllers might.
func SetAfterMembersRead(d *DB, f func()) { d.afterMembersRead = f }

// SetTrustRowCount breaks BatchTransitionMany on purpose: it no longer
// reads the batches again when its compare-and-set changed fewer rows than
// it named, and reports every batch moved.
func SetTrustRowCount(d *DB, on bool) { d.trustRowCount = on }

// PlantSeenBeforeCheck breaks Wake's hold on purpose (the planted slip of
// issue 47): "a consumer of the wake topic was seen" is remembered before
// the check, so the first held wake-up lets every later one go out to a
// topic nobody was seen reading.
func PlantSeenBeforeCheck(d *DB) { d.seenBeforeCheck = true }

// SQLStuckLive is the stuck-queue scan's live-batch statement, for its
// EXPLAIN test.
const SQLStuckLive = sqlStuckLive
