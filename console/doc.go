// Package console is mend console: a server-rendered web page for the
// engineer on call, over mend's database.
//
// # Overview
//
// The pages answer what the terminal commands answer (mend status,
// inspect, lease, retry, resolve), with links between them: an overview of
// every queue (records by state, oldest due and oldest open, the lease, the
// repair latency of the last hour, what would page), a queue (its records
// newest first, by state, and its lease history), a record (its source
// identity byte for byte, the dead letter, every event as a timeline, the
// batch outcome it settled and the wake-up message ID), the parked records
// across queues, and a chart of the last hour drawn as SVG by the server.
// With Config.Health the overview also shows a health line: mend doctor's
// checks (package doctor), run at most once per HealthEvery.
// html/template renders everything; the stylesheet and a short reload
// script are embedded in the binary. No page needs JavaScript.
//
// # Actions
//
// Retry, resolve and ending a lease term are off unless Config.AllowActions
// is set, and then need an Authenticator: an htpasswd file of bcrypt hashes
// (BasicAuth) or the header an authenticating proxy sets (ProxyHeader).
// Each action is a GET of a confirmation page that says what will change,
// then a POST carrying a CSRF token bound to the person and this process,
// and the record's version as confirmed. The POST calls the storage method
// the CLI calls (RecordRetry, RecordResolve, LeaseEndByOperator) with the
// actor console/<person> and the reason typed. Read-only, every POST is
// refused with 403 before its form is read.
//
// # Failure handling
//
// Everything shown from a dead letter is attacker-influenced: it reaches
// the page only as text through html/template, with invalid UTF-8 and
// control bytes written as \xNN and a hex dump beside it. Every response
// carries a Content-Security-Policy of 'self' only (no inline script), no
// framing, no referrer and no caching. Every read is bounded (Store). A
// failing subscription read (the host's queue database) is shown on the
// overview instead of failing it.
package console
