package binlog

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// Defaults for Config's zero values.
const (
	// BatchRowsDefault is how many committed dead letters one recording
	// transaction takes at most (dlq.Intake.RecordMany), the page the
	// offset subscription records.
	BatchRowsDefault = 500
	// ConcurrencyDefault is how many recording transactions of up to
	// BatchRows run at once when more dead letters are pending (a backlog,
	// a storm): one reader records at the store's pace, not one
	// transaction's.
	ConcurrencyDefault = 4
	// FlushIntervalDefault is how long committed dead letters wait for
	// more before they are recorded: the commit-to-record delay when the
	// server is quiet.
	FlushIntervalDefault = 50 * time.Millisecond
	// SaveIntervalDefault is how often the position is saved while
	// transactions without dead letters stream past (a position after
	// recorded rows is saved at once).
	SaveIntervalDefault = time.Second
	// RefreshIntervalDefault is how often a reader that is caught up, with
	// nothing new to save, writes its position again: the row's age (by
	// the database clock) then says whether anyone reads, which every
	// replica exports and the shipped alert reads.
	RefreshIntervalDefault = 30 * time.Second
	// HeartbeatDefault is the period the server sends heartbeats at when
	// it has nothing to send: a heartbeat says the reader is caught up.
	HeartbeatDefault = time.Second
	// StandbyPollDefault is how often a replica that is not the reader
	// tries the lease again.
	StandbyPollDefault = time.Second
	// LeaseTTLDefault is the reader's lease term: a takeover after a
	// reader dies waits at most this long.
	LeaseTTLDefault = 15 * time.Second
	// ActorDefault names the reader in records' event logs.
	ActorDefault = "binlog"
	// Table is the host table whose inserts the reader records.
	Table = "queue_messages"
)

// Recorder records dead letters; *dlq.Intake implements it.
type Recorder interface {
	RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error)
}

// Store keeps the reader's position; *storage.DB implements it.
type Store interface {
	BinlogPositionGet(ctx context.Context, name string) (storage.BinlogPosition, error)
	BinlogPositionSave(ctx context.Context, term mend.Term, p storage.BinlogPosition) error
}

// Hooks observe the reader (metrics, tests); every field is optional. They
// run on the reader's goroutine and must not block.
type Hooks struct {
	// OnReset runs when the reader starts over from the tables' contents,
	// with why (Reset* constants' words, then detail). Purged reports a
	// saved position the server no longer has.
	OnReset func(reason string, purged bool)
	// OnRecorded runs after a batch is durable, before its position is
	// saved: the rows it recorded (created or already there) and parked.
	OnRecorded func(rows []dlq.Row, parked int)
	// OnSaved runs after a position is saved.
	OnSaved func(p storage.BinlogPosition)
	// OnEvent runs for every binary-log event the reader handles, before
	// it is handled (tests use it to order a fault against the stream).
	OnEvent func(kind string)
	// OnFailed runs for every term that ended in a failure (the server,
	// its settings, the credentials, mend's store, the lease; FailureReason
	// labels it), before the pause after which the reader tries again.
	OnFailed func(err error)
}

// Config configures a Reader. Server, Intake, Parker, Store and Fence are
// required.
type Config struct {
	// Server is the queue database (mend run's --queue-dsn, parsed): its
	// address, user, password and TLS settings are the replication
	// connection's, its DBName the schema whose queue_messages is read.
	Server *mysql.Config
	// Source names the position row and the lease, so one reader reads a
	// queue database at a time ("mend-binlog/<Source>"). It must stay the
	// same across a failover of the host's primary. Default: the schema
	// name (Server.DBName).
	Source string
	// ServerID is the server_id the reader registers with, which must
	// differ from every server's and replica's in the host's topology.
	// Default: derived from the fence's holder, in 1<<30 .. 1<<31-1.
	ServerID uint32
	Intake   Recorder
	Parker   subscribe.Parker
	Store    Store
	// Fence grants the reader's lease.
	Fence *fence.Fence
	// BatchRows, Concurrency, FlushInterval, SaveInterval, Heartbeat,
	// StandbyPoll: see the defaults above.
	BatchRows     int
	Concurrency   int
	FlushInterval time.Duration
	SaveInterval  time.Duration
	// RefreshInterval: see RefreshIntervalDefault.
	RefreshInterval time.Duration
	Heartbeat       time.Duration
	StandbyPoll     time.Duration
	// ParkAfter is how many times in a row recording may fail at one row
	// for a reason that may pass before the row is parked as a stand-in
	// (subscribe.ParkAfterDefault).
	ParkAfter int
	Actor     string
	// LeaveGroup is the offset subscription's consumer group (mend run's
	// --group, "mend" by default) that the reader leaves once it has saved
	// a position in a term: a deployment switched from the offset mode to
	// binlog mode would otherwise keep the group's rows in queue_offsets at
	// a watermark nothing moves, holding the host's GC back for good.
	// Everything the group held back is recorded by then (the reader's
	// start-over imported it, or its saved position is older than the
	// switch). The reader counts the group's rows first (SELECT), and
	// leaves only when there are some; leaving needs DELETE on
	// queue_offsets, which the documented grants give to mend_leave alone,
	// so without it the reader warns with that advice and reads on. Empty:
	// leave nothing.
	LeaveGroup string
	Log        *slog.Logger
	Hooks      Hooks
	Now        func() time.Time
}

// ErrConfig is matched by every error about the Config itself.
var ErrConfig = errors.New("binlog: bad config")

func (c Config) withDefaults() Config {
	if c.Server != nil && c.Source == "" {
		c.Source = c.Server.DBName
	}
	if c.BatchRows == 0 {
		c.BatchRows = BatchRowsDefault
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = FlushIntervalDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.SaveInterval == 0 {
		c.SaveInterval = SaveIntervalDefault
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = RefreshIntervalDefault
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = HeartbeatDefault
	}
	if c.StandbyPoll == 0 {
		c.StandbyPoll = StandbyPollDefault
	}
	if c.ParkAfter == 0 && !planted.noParkDefault {
		c.ParkAfter = subscribe.ParkAfterDefault
	}
	if c.Actor == "" {
		c.Actor = ActorDefault
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ServerID == 0 && c.Fence != nil {
		c.ServerID = ServerIDFor(c.Fence.Holder())
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.Server == nil:
		return bad("Server (the queue database) is required")
	case c.Server.DBName == "":
		return bad("the queue database's DSN names no database: name the schema that holds queue_messages (…/queue_db)")
	case c.Intake == nil, c.Parker == nil, c.Store == nil, c.Fence == nil:
		return bad("Intake, Parker, Store and Fence are required")
	case c.BatchRows < 1 || c.BatchRows > subscribe.PageSizeLimit:
		return bad("BatchRows %d is outside 1..%d", c.BatchRows, subscribe.PageSizeLimit)
	case c.Concurrency < 1 || c.Concurrency > 64:
		return bad("Concurrency %d is outside 1..64", c.Concurrency)
	case c.FlushInterval < 0 || c.SaveInterval < 0 || c.RefreshInterval < 0 || c.Heartbeat < 0 || c.StandbyPoll < 0 || c.ParkAfter < 0:
		return bad("intervals and ParkAfter must not be negative")
	case c.Heartbeat > 0 && c.Heartbeat < 10*time.Millisecond:
		return bad("Heartbeat %v is under 10ms", c.Heartbeat)
	}
	if err := mend.ValidateIdentity("queue", LeaseName(c.Source), true); err != nil {
		return bad("Source %q makes no valid lease name: %v", c.Source, err)
	}
	return nil
}

// ServerIDFor is the server_id a reader whose fence holder is holder
// registers with by default: in 1<<30 .. 1<<31-1, away from the small IDs
// servers are usually given.
func ServerIDFor(holder string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(holder))
	return 1<<30 | h.Sum32()>>2
}

// LeaseName is the lease (and position row) of the reader of source.
func LeaseName(source string) string { return "mend-binlog/" + source }
