// Package client is mend's front door for a worker that links it in: one
// constructor, Open, that validates its Config, runs the checks mend run
// runs before it starts (package doctor), opens mend's database and the
// submit queue's, and returns a Client that records dead letters (Record,
// RecordMany) and, when wanted, runs the reconciler in the background
// (Start, Stop), and, for a host whose DLQ consumers cannot call Record,
// subscribes to its *_dlq topics (Config.Subscription). mend run is built
// on it. The parts it is built from
// (storage, host, fence, planner, reconcile, dlq) stay public for a host
// that needs them apart.
//
// # Overview
//
//	c, err := client.Open(ctx, client.Config{DSN: mendDSN, HostDSN: appDSN, QueueDSN: queueDSN})
//	if err != nil { ... }          // a refused check names its fix
//	defer c.Close()
//	res, err := c.Record(ctx, row.Delivery())
//	if err == nil { ack() }        // durable: acknowledge; never on an error
//
// Every zero field of Config means mend run's default (Config documents
// each). Open refuses what mend run refuses: an unparsable or unsafe DSN
// (clientFoundRows), a server too old or not strict, mend's schema out of
// this module's range or missing, grants mend's statements need, the
// host's tables and grants, and a wake topic no consumer group of the host
// reads. It returns a *doctor.RefusedError naming the first failed check
// with its fix, and logs every one. The advice names mend run's flags
// (--wake-topic, --host-dsn, ...): each is the Config field of that name.
//
// # State model
//
//	Open ──checks──▶ open databases ──▶ Client ──Start──▶ reconciling ──Stop──▶ Client ──Close──▶ closed
//	  │ refused: nothing opened                │ Record/RecordMany work in every state but closed
//	  ▼
//	error
//
// Record returns once the obligation is durable in mend's database; then
// (unless Config.NoInlineRepair) it tries the repair inline under the
// queue's fence, without waiting for it. Whatever an inline try leaves is
// finished by a reconciler: the Client's own (Start) or a mend run
// elsewhere; one of them must run.
//
// # Failure handling
//
// A *ConfigError is a setting refused: fix the Config. A
// *doctor.RefusedError is a check that failed: fix what it names (or, for
// a host that starts reading the wake topic later, WakeTopicUnjoined). Any
// other error from Open is a database that could not be reached. Record's
// errors are dlq.Intake.Record's: do not acknowledge on any of them. A
// failed inline repair is not an error (Result.RepairErr): the record is
// durable and the reconciler retries it with backoff.
package client
