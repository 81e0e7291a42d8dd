package main

// This file holds what mend run and mend doctor share about the sessions
// mend opens, as plain functions: the lease TTL bound both accept and the
// start-up checks of the identities run writes.

import (
	"time"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/storage"
)

// maxLeaseTTL is the longest --lease-ttl run and doctor accept.
const maxLeaseTTL = 24 * time.Hour

// checkLeaseTTL is the one bound on --lease-ttl, for run and doctor alike:
// at least storage.MinLeaseTTL, so the lock wait mend derives from it (whole
// seconds, at least 1) stays below it.
func checkLeaseTTL(ttl time.Duration) error {
	if ttl < storage.MinLeaseTTL || ttl > maxLeaseTTL {
		return usagef("--lease-ttl must be between %s and %s, got %s", storage.MinLeaseTTL, maxLeaseTTL, ttl)
	}
	return nil
}

// checkRunIdentities validates, before anything is connected, the
// identities mend run writes on every pass: its holder name (in lease rows)
// and its wake-up topic (in the host's queue_messages).
func checkRunIdentities(holder, wakeTopic string) error {
	if err := fence.ValidateHolder(holder); err != nil {
		return usagef("--holder: %v", err)
	}
	if err := host.ValidateWakeTopic(wakeTopic); err != nil {
		return usagef("--wake-topic: %v", err)
	}
	return nil
}

// checkHostDSNs refuses, before anything is connected, host DSNs the
// adapter's pools would refuse (they are stricter than mend's store: no
// multiStatements). Empty DSNs are left to their defaults.
func checkHostDSNs(appDSN, queueDSN string) error {
	for _, d := range []struct{ flag, dsn string }{{"--host-dsn", appDSN}, {"--queue-dsn", queueDSN}} {
		if d.dsn == "" {
			continue
		}
		if _, err := doctor.HostConfig(d.flag, d.dsn); err != nil {
			return usagef("%s: %v", d.flag, err)
		}
	}
	return nil
}
