package storage

import "regexp"

// slotLeaseRE matches the names of mend's own slot leases, the rows the
// reconcilers ("mend-reconcile/replica/NN", reconcile.ReplicaSlotName) and
// the subscription's replicas ("mend-subscribe/<group>/replica/NN",
// subscribe.SlotName) hold in mend_leases beside the queues' leases to
// count and divide the work, and the binary-log reader's one lease per
// queue database ("mend-binlog/<source>", binlog.LeaseName).
var slotLeaseRE = regexp.MustCompile(`^mend-(reconcile|subscribe/.+)/replica/[0-9]{2,}$|^mend-binlog/.+$`)

// SlotLease reports whether a lease name is one of mend's own slot leases
// rather than a queue's. A queue of that name could exist; Status tells the
// two apart by records (a slot lease never has any).
func SlotLease(name string) bool { return slotLeaseRE.MatchString(name) }

// Internal reports whether the lease is one of mend's own slot leases
// (SlotLease), which mend lease list marks and mend status, inspect and the
// metrics leave out.
func (l LeaseStatus) Internal() bool { return SlotLease(l.Term.Queue) }
