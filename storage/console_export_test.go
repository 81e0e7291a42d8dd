package storage

// The console's statements whose plans TestConsoleQueryPlans checks.
const (
	SQLConsoleRecordQueues  = sqlConsoleRecordQueues
	SQLConsoleLeaseQueues   = sqlConsoleLeaseQueues
	SQLConsoleQueueCounts   = sqlConsoleQueueCounts
	SQLConsoleQueueDone     = sqlConsoleQueueDone
	SQLConsoleTotalOpen     = sqlConsoleTotalOpen
	SQLConsoleTotalDue      = sqlConsoleTotalDue
	SQLConsoleDueQueues     = sqlConsoleDueQueues
	SQLConsoleRecentDone    = sqlConsoleRecentDone
	SQLConsoleRecordedOpen  = sqlConsoleRecordedOpen
	SQLConsoleQueueLatency  = sqlConsoleQueueLatency
	SQLConsoleOverdue       = sqlConsoleOverdue
	SQLConsoleSlowRepairs   = sqlConsoleSlowRepairs
	SQLConsoleQueueRecords  = sqlConsoleQueueRecords
	SQLConsoleParked        = sqlConsoleParked
	SQLConsoleRecordEvents  = sqlConsoleRecordEvents
	SQLConsoleFailing       = sqlConsoleFailing
	SQLConsoleFailingErrors = sqlConsoleFailingErrors
	SQLConsoleParkedScan    = sqlConsoleParkedScan
)

// The console's statements that derive a record's topic kind at read time,
// and the arguments of their kind condition (which come first).
var (
	SQLConsoleTotalParked   = sqlConsoleTotalParked
	SQLConsoleTotalRecorded = sqlConsoleTotalRecorded
	SQLConsoleParkedByQueue = sqlConsoleParkedByQueue
	SQLConsoleQueueRecorded = sqlConsoleQueueRecorded
	SQLNotRecorded          = notRecorded
	RecordedArgs            = recordedArgs
)

// SetConsoleLimits lowers the console's read bounds for a test that must
// reach them; the returned func restores them. Not for parallel tests.
func SetConsoleLimits(count, repairs int) (restore func()) {
	c, r := consoleCountLimit, consoleRepairsLimit
	consoleCountLimit, consoleRepairsLimit = count, repairs
	return func() { consoleCountLimit, consoleRepairsLimit = c, r }
}

// SetConsoleQueueCountsSQL swaps the statement ConsoleQueueStatus runs (a
// planted bug, for a negative control); the returned func restores it.
// Not for parallel tests.
func SetConsoleQueueCountsSQL(q string) (restore func()) {
	old := consoleQueueCounts
	consoleQueueCounts = q
	return func() { consoleQueueCounts = old }
}

// StatusAuditArgs are the arguments of the audit kind's condition.
func StatusAuditArgs() []any { return append([]any{}, statusAuditArgs...) }
