package storage

// The console's statements whose plans TestConsoleQueryPlans checks.
const (
	SQLConsoleRecordQueues  = sqlConsoleRecordQueues
	SQLConsoleLeaseQueues   = sqlConsoleLeaseQueues
	SQLConsoleQueueCounts   = sqlConsoleQueueCounts
	SQLConsoleQueueDone     = sqlConsoleQueueDone
	SQLConsoleTotalOpen     = sqlConsoleTotalOpen
	SQLConsoleTotalDue      = sqlConsoleTotalDue
	SQLConsoleTotalParked   = sqlConsoleTotalParked
	SQLConsoleDueQueues     = sqlConsoleDueQueues
	SQLConsoleRecentDone    = sqlConsoleRecentDone
	SQLConsoleRecordedOpen  = sqlConsoleRecordedOpen
	SQLConsoleQueueLatency  = sqlConsoleQueueLatency
	SQLConsoleOverdue       = sqlConsoleOverdue
	SQLConsoleParkedByQueue = sqlConsoleParkedByQueue
	SQLConsoleSlowRepairs   = sqlConsoleSlowRepairs
	SQLConsoleQueueRecords  = sqlConsoleQueueRecords
	SQLConsoleParked        = sqlConsoleParked
	SQLConsoleRecordEvents  = sqlConsoleRecordEvents
	SQLConsoleFailing       = sqlConsoleFailing
	SQLConsoleFailingErrors = sqlConsoleFailingErrors
	SQLConsoleParkedScan    = sqlConsoleParkedScan
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
