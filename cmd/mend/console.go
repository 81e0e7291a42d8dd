package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/console"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// consoleListenDefault is loopback: the console is reachable from another
// machine only when the operator says so (see docs/console.md).
const consoleListenDefault = "127.0.0.1:8089"

// mend console is its own command, not a flag of run: it can run with a
// read-only database user, on another host or port, with its own exposure
// and authentication, and be stopped or restarted without touching the
// replicas that repair.
func newConsoleCmd(a *app) *cobra.Command {
	f := a.newCommand("console", "serve the web console: queues, records, events, what would page",
		"Serve mend's web console: an overview of every queue (what would page, records by state, leases, repair\n"+
			"latency), a queue's records and lease history, a record's identity, dead letter and event timeline, and the\n"+
			"parked records. Read-only unless --allow-actions, which needs --auth-file or --auth-header.\n"+
			"Binds 127.0.0.1 unless --listen says otherwise; see docs/console.md before exposing it.", withDSN|withLog)
	listen := f.String("listen", consoleListenDefault, "address to serve on (host:port)")
	allow := f.Bool("allow-actions", false, "enable retry, resolve and ending a lease term (needs --auth-file or --auth-header)")
	f.cmdLineOnly("allow-actions")
	authFile := f.String("auth-file", "", "htpasswd file of bcrypt hashes (htpasswd -B): basic auth for every page")
	authHeader := f.String("auth-header", "", "trust this header for the person's name (set by an authenticating proxy in front; loopback --listen only)")
	authSecretFile := f.String("auth-secret-file", "", "with --auth-header: a file holding the secret the proxy sends in --auth-secret-header on every request (any local process reaches loopback; only the proxy knows it)")
	authSecretHeader := f.String("auth-secret-header", console.ProxySecretHeaderDefault, "with --auth-header: the header carrying the proxy's secret")
	external := f.StringArray("external-name", nil, "a host[:port] the console is reached by besides --listen (the name behind a proxy, as the browser's Host header says it); repeatable. Any other Host is refused (421)")
	pageSize := f.Int("page-size", console.PageSizeDefault, "rows per page")
	queueDSN := f.String("queue-dsn", "", "DSN of the host's queue database: also show the subscription's lag per dead-letter topic")
	group := f.String("group", subscribe.GroupDefault, "the subscription's consumer group (with --queue-dsn)")
	return f.run(func(ctx context.Context, _ []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		host, _, err := net.SplitHostPort(*listen)
		if err != nil {
			return usagef("--listen %q: want host:port (%v)", *listen, err)
		}
		loopback := host == "localhost"
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			loopback = true
		}
		if *authFile != "" && *authHeader != "" {
			return usagef("--auth-file and --auth-header: choose one")
		}
		if *authHeader != "" && !loopback {
			return usagef("--auth-header trusts whoever can reach the console to name themselves: bind --listen to loopback and put the authenticating proxy in front")
		}
		if *pageSize < 1 || *pageSize > 1000 {
			return usagef("--page-size must be 1 to 1000")
		}
		var auth console.Authenticator
		switch {
		case *authFile != "":
			ba, err := console.LoadBasicAuth(*authFile)
			if err != nil {
				return usagef("--auth-file: %v", err)
			}
			auth = ba
		case *authHeader != "":
			if *authSecretFile == "" {
				return usagef("--auth-header needs --auth-secret-file: a secret the proxy adds to every request in %s, which another local process (or a web page whose name is rebound to loopback) does not know", *authSecretHeader)
			}
			b, err := os.ReadFile(*authSecretFile)
			if err != nil {
				return usagef("--auth-secret-file: %v", err)
			}
			secret := strings.TrimSpace(string(b))
			if len(secret) < 16 {
				return usagef("--auth-secret-file: the secret is %d bytes; give at least 16 random ones (openssl rand -hex 32)", len(secret))
			}
			auth = console.ProxyHeader{Name: *authHeader, SecretHeader: *authSecretHeader, Secret: secret}
		}
		if *allow && auth == nil {
			return usagef("--allow-actions needs --auth-file or --auth-header: an action records who took it")
		}
		a.scrub.addDSN(dsn)
		a.scrub.addDSN(*queueDSN)
		if *queueDSN != "" {
			if _, err := checkDSN("--queue-dsn", *queueDSN); err != nil {
				return err
			}
			if err := mend.ValidateIdentity("group", *group, true); err != nil {
				return usagef("--group: %v", err)
			}
		}
		log := f.logger()
		if !loopback && auth == nil {
			log.Warn("the console is served beyond this machine without authentication: anyone who reaches it reads every dead letter", "listen", *listen)
		}
		store, err := storage.Open(ctx, dsn, storage.Options{})
		if err != nil {
			return fmt.Errorf("open mend's database: %w", err)
		}
		defer store.Close()
		cfg := console.Config{Store: store, AllowActions: *allow, Auth: auth, PageSize: *pageSize, Logger: log, Redact: a.scrub.clean,
			Hosts: consoleHosts(*listen, *external), Health: consoleHealth(dsn)}
		if *queueDSN != "" {
			qdsn, grp := *queueDSN, *group
			cfg.Lag = func(ctx context.Context) ([]console.TopicLag, error) {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				lag, err := subscriptionLag(ctx, qdsn, grp)
				if err != nil {
					return nil, err
				}
				now := time.Now()
				out := make([]console.TopicLag, len(lag))
				for i, l := range lag {
					out[i] = console.TopicLag{Topic: l.Topic, Rows: l.Rows, Age: l.Age(now)}
				}
				return out, nil
			}
		}
		cfg.Binlog = func(ctx context.Context) ([]console.BinlogReader, error) {
			rs, err := binlogReaders(ctx, store, true)
			out := make([]console.BinlogReader, len(rs))
			for i, r := range rs {
				out[i] = console.BinlogReader{Source: r.Source, Role: r.Role, Holder: r.Holder, Epoch: r.Epoch, Position: r.Position,
					Saved: secs(r.SavedSeconds), Lag: secs(r.LagSeconds), Term: secs(r.TermSeconds), NoReader: secs(r.NoReaderSeconds),
					FailedTerms: r.FailedTerms, NotReading: r.NotReading, Pages: r.Pages,
					Purged: strings.HasPrefix(r.ResetReason, binlog.ResetPurged)}
				if r.ResetReason != "" {
					out[i].Reset = r.ResetAt + " " + r.ResetReason
				}
			}
			return out, err
		}
		srv, err := console.New(cfg)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", *listen, err)
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		if ip := net.ParseIP(host); (host == "" || (ip != nil && ip.IsUnspecified())) && len(*external) == 0 {
			log.Warn("--listen names no host: only requests whose Host is the --listen address literally are answered; give the names it is reached by with --external-name", "listen", *listen)
		}
		log.Info("console serving", "url", "http://"+ln.Addr().String()+"/", "actions", *allow)
		done := make(chan error, 1)
		go func() { done <- hs.Serve(ln) }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	})
}

// consoleHosts is the Host values the console answers: the --listen
// address (with localhost beside a loopback IP, and the reverse) and each
// --external-name. A page whose DNS name is rebound to the address names
// itself in Host and is refused.
func consoleHosts(listen string, external []string) []string {
	hosts := []string{listen}
	if h, port, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(h); h == "localhost" || (ip != nil && ip.IsLoopback()) {
			hosts = append(hosts, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
		}
		if port == "80" {
			hosts = append(hosts, h)
		}
	}
	return append(hosts, external...)
}

// consoleHealth is the console's health line: mend doctor's checks of
// mend's database (package doctor, the same definitions as mend doctor and
// mend run's start-up), run as the console's user. The grants check is
// left out: it asks whether the user may do what mend run does, and the
// console's user is often read-only by design (docs/console.md).
func consoleHealth(dsn string) func(context.Context) []doctor.Check {
	return func(ctx context.Context) []doctor.Check {
		all, _ := doctor.Database(ctx, dsn, fence.TTLDefault)
		out := all[:0:0]
		for _, c := range all {
			if c.Name != "grants" {
				out = append(out, c)
			}
		}
		return out
	}
}
