package mend

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error mend returns matches at most one of these
// through errors.Is, and callers decide what to do by that match alone.
var (
	// ErrNotFound means the named record, event or operation does not exist.
	ErrNotFound = errors.New("mend: not found")
	// ErrConflict means a compare-and-set lost: the version moved since the
	// caller read it. Re-read and decide again.
	ErrConflict = errors.New("mend: version conflict")
	// ErrStaleRecord means the record ID no longer names the record stored for
	// its source identity: the record was pruned and created again. The caller
	// holds an old record and must re-read by source identity.
	ErrStaleRecord = errors.New("mend: stale record id")
	// ErrInvalid means the input can never succeed as given. It is returned
	// before anything reaches the database.
	ErrInvalid = errors.New("mend: invalid input")
	// ErrIdentityMismatch means the stored verbatim identity differs from the
	// one asked for although their source keys are equal. It signals a hash
	// collision or a corrupted row, never a normal race; it is not retryable.
	ErrIdentityMismatch = errors.New("mend: stored identity differs from request")
	// ErrFenced means a planner write was refused because the writer's lease
	// term (holder and epoch) is no longer current. Nothing was written. It is
	// never retried: the writer must stop acting on the queue.
	ErrFenced = errors.New("mend: fenced")
	// ErrLeaseLost means the caller's lease on a queue ended or can no longer
	// be trusted. The holder steps back and contends again later.
	ErrLeaseLost = errors.New("mend: lease lost")
	// ErrLeaseHeld means another holder's lease on the queue is current. It
	// is the normal answer to a non-blocking acquire; try again later.
	ErrLeaseHeld = errors.New("mend: lease held by another holder")
	// ErrBusy means the database refused the work for now (deadlock retries
	// exhausted, lock wait timeout). The transaction was rolled back whole;
	// retrying later is safe.
	ErrBusy = errors.New("mend: database busy")
	// ErrUnavailable means the database could not be reached or the
	// connection failed before a commit was sent, so nothing was written.
	// Retrying later is safe.
	ErrUnavailable = errors.New("mend: database unavailable")
	// ErrAmbiguous means the outcome of a write is unknown: the connection
	// failed while the commit was in flight. The write may or may not have
	// been applied; resolve it by looking its op ID up.
	ErrAmbiguous = errors.New("mend: outcome unknown")
)

// ValidationError describes input that was rejected before reaching the
// database. It matches ErrInvalid.
type ValidationError struct {
	Field  string // the offending field, e.g. "message_id"
	Reason string // what is wrong and, by implication, what to fix
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("mend: invalid %s: %s", e.Field, e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalid) match.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// AmbiguousError reports a write whose commit may or may not have happened.
// OpID is the operation to look up to find out. It matches ErrAmbiguous and
// also unwraps to the underlying driver error.
type AmbiguousError struct {
	OpID string
	Err  error
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("mend: outcome of op %s unknown (look it up by op id): %v", e.OpID, e.Err)
}

// Unwrap returns both ErrAmbiguous and the cause.
func (e *AmbiguousError) Unwrap() []error { return []error{ErrAmbiguous, e.Err} }

// Class says how a caller should react to an error.
type Class int

// The classes, from most to least benign.
const (
	// ClassNone is the class of a nil error.
	ClassNone Class = iota
	// ClassRetryable errors leave nothing half done; the same call may be
	// repeated (after re-reading, for ErrConflict).
	ClassRetryable
	// ClassAmbiguous errors need the op ID looked up before anything else.
	ClassAmbiguous
	// ClassFenced errors mean the caller lost its right to write: stop.
	ClassFenced
	// ClassPermanent errors will fail the same way again.
	ClassPermanent
)

func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassRetryable:
		return "retryable"
	case ClassAmbiguous:
		return "ambiguous"
	case ClassFenced:
		return "fenced"
	default:
		return "permanent"
	}
}

// Classify sorts err into a Class. Fencing wins over everything else, so a
// fenced write is never retried by accident; an unknown error is permanent.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrFenced), errors.Is(err, ErrLeaseLost):
		return ClassFenced
	case errors.Is(err, ErrAmbiguous):
		return ClassAmbiguous
	case errors.Is(err, ErrConflict), errors.Is(err, ErrBusy), errors.Is(err, ErrLeaseHeld),
		errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return ClassRetryable
	default:
		return ClassPermanent
	}
}

// IsRetryable reports whether the same call may simply be made again.
func IsRetryable(err error) bool { return Classify(err) == ClassRetryable }

// SpellingError says a host read found a row whose identity differs in its
// bytes from the one asked for: the host's collation matched "Q/batch/1" to
// a stored "q/batch/1", or 'x' to 'x '. To mend, whose identities are
// byte-exact, the row asked for does not exist, so it matches ErrNotFound;
// but unlike a plain miss it needs an operator, so the planner parks the
// record with this message, which names both spellings.
type SpellingError struct {
	Field  string // "batch_id", "queue", "request_id", ...
	Asked  string // what mend asked for
	Stored string // what the host's row holds
}

func (e *SpellingError) Error() string {
	return fmt.Sprintf("mend: host %s %q matched a row stored as %q (the host's collation is not byte-exact): treated as not found", e.Field, e.Asked, e.Stored)
}

// Unwrap lets errors.Is(err, ErrNotFound) match.
func (e *SpellingError) Unwrap() error { return ErrNotFound }

// ErrDenied means the server refused a statement because the account mend
// logs in as lacks a privilege (MySQL errors 1142, 1143, 1044). Nothing was
// written. Retrying does not help until someone runs the GRANT that
// DeniedError names; mend's records retry it with backoff meanwhile.
var ErrDenied = errors.New("mend: statement denied (missing privilege)")

// DeniedError is a statement the server refused for a missing privilege,
// with what is needed to grant it. It matches ErrDenied and unwraps to the
// driver's error.
type DeniedError struct {
	Privilege string // e.g. "UPDATE"; empty for a whole-database refusal (1044)
	User      string // the user name the server refused
	Database  string // empty when the server's message did not say
	Table     string // empty for a whole-database refusal
	Column    string // set for a column privilege (1143)
	Err       error
}

// Grant is the statement that fixes the refusal, for the account named
// User (TO 'user' is that user at any host, '%'; mend doctor prints the
// exact account).
func (e *DeniedError) Grant() string {
	q := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	// MySQL 8 and 9 name the table alone ("for table 'batch'"): then the
	// GRANT names it alone too, which the server reads as that table of
	// the session's database (the DSN's); MariaDB names both.
	var on string
	switch {
	case e.Table == "":
		on = q(e.Database) + ".*"
	case e.Database == "":
		on = q(e.Table)
	default:
		on = q(e.Database) + "." + q(e.Table)
	}
	priv := e.Privilege
	switch {
	case priv == "":
		priv = "SELECT, INSERT, UPDATE, DELETE"
	case e.Column != "":
		priv += " (" + q(e.Column) + ")"
	}
	return fmt.Sprintf("GRANT %s ON %s TO '%s'", priv, on, strings.ReplaceAll(e.User, "'", `\'`))
}

func (e *DeniedError) Error() string {
	what := "access"
	if e.Privilege != "" {
		what = e.Privilege
	}
	in := ""
	if e.Database == "" {
		in = ", in the database its DSN names"
	}
	return fmt.Sprintf("mend: %s denied to user %q (missing privilege; fix: %s%s): %v", what, e.User, e.Grant(), in, e.Err)
}

// Unwrap returns ErrDenied and the driver's error.
func (e *DeniedError) Unwrap() []error { return []error{ErrDenied, e.Err} }
