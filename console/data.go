package console

import (
	"context"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// Store is every read and write the console makes, in one place, so the
// console follows the storage package when its status numbers change. The
// reads are bounded (pages, LIMITs, recent index ranges); the writes are the
// calls mend retry, mend resolve and mend lease release make.
// *storage.DB implements it.
type Store interface {
	ConsoleQueueNames(ctx context.Context, after string, limit int) ([]string, bool, error)
	ConsoleQueueStatus(ctx context.Context, queues []string) ([]storage.QueueStatus, bool, error)
	ConsoleDueQueues(ctx context.Context, limit int) ([]storage.QueueAge, bool, error)
	ConsoleTotals(ctx context.Context) (storage.ConsoleTotals, error)
	ConsoleActivity(ctx context.Context, minutes int, queues []string) (storage.ConsoleActivity, error)
	ConsoleAlerts(ctx context.Context, p storage.ConsoleAlertParams) (storage.ConsoleAlerts, error)
	ConsoleQueueRecords(ctx context.Context, queue string, state mend.State, after storage.RecordCursor, limit int) ([]mend.Record, error)
	ConsoleRecordEvents(ctx context.Context, queue string, id mend.RecordID, limit int) ([]mend.Event, error)
	ConsoleParked(ctx context.Context, f storage.ParkedFilter) ([]mend.Record, error)
	ConsoleParkedMatching(ctx context.Context, f storage.ParkedFilter, scan int) (storage.ParkedMatches, error)
	ConsoleFailingQueues(ctx context.Context, read, show int) (storage.FailingQueues, error)
	VerifyRunLast(ctx context.Context) (storage.VerifyRun, bool, error)
	LeaseHistory(ctx context.Context, queue string, limit int) ([]storage.LeaseTerm, error)
	LeaseGet(ctx context.Context, queue string) (storage.LeaseStatus, error)
	RecordFind(ctx context.Context, id mend.RecordID) (mend.Record, error)

	RecordRetry(ctx context.Context, p storage.RetryParams) (mend.Record, error)
	RecordResolve(ctx context.Context, p storage.ResolveParams) (mend.Record, error)
	LeaseEndByOperator(ctx context.Context, queue string, epoch int64) (mend.Term, error)
}

// TopicLag is the subscription's lag on one dead-letter topic, as mend
// status --queue-dsn shows it.
type TopicLag struct {
	Topic string
	Rows  int64         // dead letters above the group's watermarks
	Age   time.Duration // how long the oldest of them has waited
}

// BinlogReader is one of binlog mode's readers, as mend status shows it:
// its saved position, and whether a replica holds its lease, all from
// mend's database (the console runs no reader).
type BinlogReader struct {
	Source   string
	Role     string // "reading" or "no reader"
	Holder   string // the replica reading, with Role "reading"
	Epoch    int64
	Position string        // file:pos, and the GTID set where there is one
	Saved    time.Duration // how long ago the position was saved
	Lag      time.Duration // the last transaction read, its commit to the save
	Reset    string        // the last reset: when and why ("" if none)
	// Term is how long the live term has lasted (Role "reading"); NoReader
	// how long since the last one ended (Role "no reader").
	Term, NoReader time.Duration
	// FailedTerms counts the terms of the last 10 minutes that their holder
	// ended itself within minutes: a reader that fails, releases its lease
	// and retries (its process's log and mend_binlog_failures_total say
	// why).
	FailedTerms int
	// NotReading is MendBinlogNotReading's condition now (the position not
	// saved for minutes and no term that lasted); Pages says it has held for
	// the rule's for, so the rule fires. Purged says the last reset found
	// the saved position purged (MendBinlogPositionPurged).
	NotReading, Pages, Purged bool
}

// parkedScan bounds the parked records one page of the reason filter
// searches (their last errors are in no index). A var for a test.
var parkedScan = storage.ConsoleParkedScanDefault

// alertParams are the suggested alert rules of docs/operations.md:
// MendRepairStuck (due for over 10 minutes), MendRepairSLO (a repair in the
// last 15 minutes slower than 10), MendRecordsParked (any parked record
// but those recorded for the audit, a ticket after 15 minutes).
var alertParams = storage.ConsoleAlertParams{
	OverdueAfter: 10 * time.Minute,
	SLOWindow:    15 * time.Minute,
	SLOBound:     10 * time.Minute,
	Limit:        1000,
}

const (
	// failingPagesAfter is MendRepairsFailing's threshold.
	failingPagesAfter = 30 * time.Second
	// binlogWindow is MendBinlogNotReading's for, over which FailedTerms
	// counts.
	binlogWindow     = 10 * time.Minute
	parkedPagesAfter = 15 * time.Minute
	lagPagesAfter    = 10 * time.Minute
	// chartMinutes is the overview's window: its repair latency (mend
	// status's RepairLatencyWindowDefault, an hour) and its chart.
	chartMinutes     = 60
	leaseHistoryRows = 20
	recordEventsMax  = 500
	// dueQueuesRead bounds the due records the overview reads to order
	// the queues with work due (ConsoleDueQueues).
	dueQueuesRead = 10_000
	// failingRead bounds the failing records of each state (pending,
	// settled) the overview reads for its "failing now" section
	// (ConsoleFailingQueues), the most attempts first: an index-only range
	// of failing records alone (migration 0017). failingShow is how many
	// failing queues it lists, with their worst record's error.
	failingRead = 1_000
	failingShow = 20
	// restRounds bounds the reads of queue names one overview page makes
	// past queues already listed among the stuck ones.
	restRounds = 8
)
