// Package doctor holds mend's checks of the databases it is given: the
// server, mend's schema and grants, the sessions mend opens, and the
// submit queue's tables, grants, wake topic and subscription. One
// definition of each check serves mend doctor (which prints them all),
// mend run's preflight and the client package's Open (which refuse to
// start on a failure), so a worker that links mend in is held to what the
// binary is.
//
// # Overview
//
// A check is a [Check]: a name, a [Status] (OK, Warn or Fail), what was
// found, and for anything not OK the fix. [Run] runs every check a
// [Params] asks for, in mend doctor's order; [Preflight] runs the same and
// returns a *[RefusedError] naming the first failure. The parts ([Database],
// [Host], [WakeTopic], [Subscription], [Schema], [Engine]) run alone too.
// The advice names mend run's flags (--dsn, --host-dsn, --queue-dsn,
// --wake-topic, --wake-topic-unjoined, --lease-ttl, --subscribe-settle);
// each is the Params field (or client.Config field) of the same name.
//
// # State model
//
// The checks hold no state. They only read: catalog queries, session
// variables, and EXPLAIN of a statement that needs exactly the privilege
// in question, which checks it as running it would but executes nothing.
// Each opens its own small pools (two connections) and closes them:
//
//	Run ──▶ Database(dsn)           server, engine, topology, schema, sql_mode,
//	   │                            identity columns, grants, clock, lock wait,
//	   │                            session, TLS
//	   ├──▶ Host(hostDSN, queueDSN) tables, keys, grants, session, TLS
//	   ├──▶ WakeTopic(queueDSN)     a reader of the wake topic (host.CheckWakeTopic's rule)
//	   └──▶ Subscription(queueDSN)  tables, settle window, open transactions, lag
//
// # Failure handling
//
// A check that cannot run (no connection, a catalog read refused) is
// reported as Fail with what went wrong, never skipped. Warn is for what
// mend is correct with but an operator should know (a plain-text session,
// a newer expand-only schema). Only Fail refuses a start.
package doctor
