// Command mend runs and inspects mend: the reconciler service, schema
// migrations, operator queries, a health check of the database setup and a
// self-contained demo. Run `mend help` for the commands.
//
// The main package only parses flags and environment into a config, wires
// the library's packages together and runs them. The command line is
// spf13/cobra: each command is built by a newXCmd(app) function (cli.go has
// the shared flags, the MEND_* twins and the exit codes: 0 ok, 1 failure, 2
// usage), and Main(ctx, args, stdout, stderr, getenv) runs one invocation so
// tests drive the binary in-process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx: `run` stops taking queues,
	// abandons in-flight work cleanly and releases its leases. A second
	// signal kills the process the default way.
	_ = mysql.SetLogger(driverLog{fallback: os.Stderr}) // before any connection; see driverLogger
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // from now on a signal has its default effect
	}()
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
