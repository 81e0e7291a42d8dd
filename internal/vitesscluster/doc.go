// Package vitesscluster runs a Vitess cluster shaped as production runs it, for tests: etcd as
// the topology server, vtctld, vtgate, and for each of Shards shards a primary and replicas,
// each a vttablet with its own mysqld (the MySQL 9.7 of scripts/mysql-rootfs.sh, initialised by
// mysqlctl), with the keyspace's durability policy semi_sync. Everything listens on 127.0.0.1 on
// ports chosen free, in a temporary directory Close removes.
//
// It is the backend of itest's failover scenario (make test-vitess-failover): unlike
// internal/vitessdb (vttestserver: one mysqld and one vtcombo process for every shard, no
// replicas, no topology server) its primaries can move (PlannedReparent, EmergencyReparent)
// and die (KillPrimary: SIGKILL to a primary's mysqld and its vttablet).
//
// # Overview
//
// Start runs, in order: etcd (Debian's /usr/bin/etcd; the cell zone1 is added with
// vtctldclient --server=internal), vtctld, CreateKeyspace with --durability-policy=semi_sync,
// mysqlctl init for every tablet (in parallel), one vttablet per mysqld (all replicas), a
// PlannedReparentShard per shard that elects the first tablet primary, mend's schema on each
// primary (it replicates), ApplyVSchema, and vtgate (--transaction-mode=SINGLE, as vitessdb's,
// and --enable-buffer, so a planned reparent holds queries instead of failing them).
//
// Measured on two cores shared with other work (docs/scaling.md): Start takes 1.5-2 minutes, most
// of it the six mysqld initialisations, and the cluster holds about 2.5 GiB resident (RSS reports
// the sum: six mysqld about 1.8 GiB with a 64 MB buffer pool each, six vttablets 0.5 GiB).
//
// # Durability
//
// semi_sync: a primary's COMMIT returns only once a replica has the transaction in its relay
// log (rpl_semi_sync_source_timeout is effectively infinite in Vitess's mysql90.cnf, so a
// primary without an acker blocks rather than falling back to asynchronous replication). An
// acknowledged write is therefore on at least one replica, and EmergencyReparentShard promotes
// the most advanced replica. The plugins are MySQL 9.7's semisync_source.so and
// semisync_replica.so, which the root file system carries and mysql90.cnf loads. Each shard has
// TabletsPerShard tablets (default 3: a primary and two replicas) because Vitess refuses an
// emergency reparent whose new primary would have no replica left to acknowledge its writes
// ("will not be able to make forward progress"): with one replica per shard, killing a primary
// leaves a shard that semi_sync cannot serve.
//
// # State model
//
//	Start ──> running ──PlannedReparent / KillPrimary + EmergencyReparent──> running (primary moved)
//	                  └──Close──> every process killed, directory removed
//
// # Failure handling
//
// mysqlctl and mysqld refuse root: as root every process runs as nobody through setpriv, with
// CAP_DAC_READ_SEARCH (to read the Vitess cache under root's home), as vitessdb does. Each
// process runs in a process group of its own, so a kill reaches exactly one; Close kills them
// all and every process whose command line names the directory (mysqld, which mysqlctl leaves
// running). A test binary that dies without Close leaves the cluster: Start first reaps every
// cluster directory whose owner (owner.pid) is gone (vitessdb.Reap).
package vitesscluster
