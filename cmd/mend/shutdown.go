package main

import (
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// shutdownErr is what closing one of mend run's pools adds to the run's
// result runErr. When the run itself ended cleanly (runErr nil: SIGTERM
// after a clean stop, or run --once's good pass), a session the server
// killed while it sat idle in the pool (a password rotation's KILL,
// wait_timeout) fails only its own close, not the run: issue 45's SIGTERM
// exited 1, "bad connection", which Kubernetes and systemd read as a
// failure. Every other close error is kept. go-sql-driver v1.10 does not
// report a killed idle session on close (its liveness check runs when the
// pool hands a connection out), so this holds exit 0 whatever a driver
// does. A variable so that a test can plant the old mapping
// (TestSIGTERMAfterKilledSessionsControl).
var shutdownErr = func(runErr, closeErr error) error {
	if runErr != nil {
		return closeErr
	}
	return dropKilledSessions(closeErr)
}

// dropKilledSessions returns err without the bad-connection errors
// (driver.ErrBadConn, mysql.ErrInvalidConn) it joins.
func dropKilledSessions(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var kept []error
		for _, e := range j.Unwrap() {
			kept = append(kept, dropKilledSessions(e))
		}
		return errors.Join(kept...)
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) {
		return nil
	}
	return err
}
