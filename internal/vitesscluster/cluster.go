package vitesscluster

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/vitessdb"
)

// Defaults of Config.
const (
	// DefaultKeyspace is the keyspace Start creates, sharded in Shards (-80, 80-).
	DefaultKeyspace = "mend"
	// DefaultTabletsPerShard is a primary and two replicas: semi_sync needs a replica left to
	// acknowledge writes after an emergency reparent has promoted the other (see the package doc).
	DefaultTabletsPerShard = 3
	// DefaultBufferPool is each mysqld's innodb_buffer_pool_size.
	DefaultBufferPool = "64M"
	// Durability is the keyspace's durability policy.
	Durability = "semi_sync"
	// Cell is the one cell every process is in.
	Cell = "zone1"

	startTimeout = 8 * time.Minute // every mysqld initialised on two busy cores, then the rest
	stopTimeout  = 30 * time.Second
)

// ShardNames are the keyspace's shards.
var ShardNames = vitessdb.ShardNames

// ErrNoBinaries means the Vitess cache lacks the cluster's binaries (scripts/vitess.sh builds them).
var ErrNoBinaries = errors.New("vitesscluster: Vitess binaries not built (bash scripts/vitess.sh --cluster builds vtctld, vtgate and vttablet too)")

// Find returns the Vitess directory if it holds every binary the cluster runs, and /usr/bin/etcd
// (or etcd on PATH) exists; else an error saying what is missing.
func Find() (vitessDir, etcd string, err error) {
	dir := vitessdb.Dir()
	for _, f := range []string{"bin/vtctld", "bin/vtgate", "bin/vttablet", "bin/mysqlctl", "bin/vtctldclient", "mysql/bin/mysqld"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", "", fmt.Errorf("%w: no %s", ErrNoBinaries, filepath.Join(dir, f))
		}
	}
	etcd, err = exec.LookPath("etcd")
	if err != nil {
		if _, e := os.Stat("/usr/bin/etcd"); e != nil {
			return "", "", errors.New("vitesscluster: no etcd (Debian: apt-get install etcd-server)")
		}
		etcd = "/usr/bin/etcd"
	}
	return dir, etcd, nil
}

// Config says what to start.
type Config struct {
	// VitessDir is the directory scripts/vitess.sh prints. Required.
	VitessDir string
	// Etcd is the etcd binary. Required.
	Etcd string
	// Keyspace is the keyspace's name (DefaultKeyspace when empty).
	Keyspace string
	// TabletsPerShard is the tablets of each shard, the first the initial primary
	// (DefaultTabletsPerShard when 0; at least 2).
	TabletsPerShard int
	// Schema is the statements run on each shard's primary at start (they replicate).
	Schema []string
	// VSchema is the keyspace's vschema (JSON).
	VSchema []byte
	// BufferPool is each mysqld's innodb_buffer_pool_size (DefaultBufferPool when empty).
	BufferPool string
	// DirPrefix names the temporary directory (default "mend-vitess-cluster-").
	DirPrefix string
	// Log, when set, receives one line per start step with its duration.
	Log func(format string, args ...any)
}

// Tablet is one vttablet and its mysqld.
type Tablet struct {
	// Alias is the tablet's alias, zone1-0000000UID.
	Alias string
	// UID is the tablet's uid (and mysqld's server id).
	UID int
	// Shard is the shard the tablet serves.
	Shard string
	// MySQLPort, Port and GRPCPort are mysqld's, and vttablet's HTTP and gRPC ports (127.0.0.1).
	MySQLPort, Port, GRPCPort int

	dir    string // $VTDATAROOT/vt_UID
	proc   *proc  // vttablet
	killed bool   // by KillPrimary (under Cluster.mu)
}

// Socket returns the path of the tablet's mysqld socket.
func (t *Tablet) Socket() string { return filepath.Join(t.dir, "mysql.sock") }

// MySQLPid returns the pid of the tablet's mysqld, from its pid file.
func (t *Tablet) MySQLPid() (int, error) {
	b, err := os.ReadFile(filepath.Join(t.dir, "mysql.pid"))
	if err != nil {
		return 0, fmt.Errorf("vitesscluster: mysqld pid of %s: %w", t.Alias, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Cluster is a running cluster. Its methods are safe for concurrent use.
type Cluster struct {
	// Dir is the temporary directory (etcd's data, every mysqld's, logs).
	Dir string
	// Keyspace is the keyspace, sharded in ShardNames.
	Keyspace string
	// VTGate is vtgate's MySQL protocol address, 127.0.0.1:PORT (user root, no password).
	VTGate string
	// Tablets lists every tablet, by shard, the initial primary first.
	Tablets []*Tablet
	// StartedIn is how long Start took.
	StartedIn time.Duration

	vitessDir  string
	etcdAddr   string
	vtctldGRPC string
	env        []string
	logf       func(string, ...any)

	mu    sync.Mutex
	procs []*proc

	closeOnce sync.Once
	closeErr  error
}

// proc is one process the cluster started, in a process group of its own.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// Start runs the cluster cfg describes and returns once vtgate serves the keyspace's tables on
// every shard's primary. ctx bounds the start.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	begin := time.Now()
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("vitesscluster: %w on %s (Linux only)", vitessdb.ErrUnsupported, runtime.GOOS)
	}
	if cfg.VitessDir == "" || cfg.Etcd == "" {
		return nil, errors.New("vitesscluster: Config.VitessDir and Config.Etcd are required")
	}
	perShard := cmp.Or(cfg.TabletsPerShard, DefaultTabletsPerShard)
	if perShard < 2 {
		return nil, fmt.Errorf("vitesscluster: TabletsPerShard %d: a shard needs a primary and a replica", perShard)
	}
	prefix := cmp.Or(cfg.DirPrefix, "mend-vitess-cluster-")
	if err := vitessdb.Reap(prefix); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("vitesscluster: %w", err)
	}
	c := &Cluster{Dir: tmp, Keyspace: cmp.Or(cfg.Keyspace, DefaultKeyspace), vitessDir: cfg.VitessDir, logf: cfg.Log}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := os.WriteFile(filepath.Join(tmp, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("vitesscluster: %w", err)
	}
	data := filepath.Join(tmp, "data")
	for _, d := range []string{"logs", "data/tmp", "etcd"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return nil, fmt.Errorf("vitesscluster: %w", err)
		}
	}
	// Each mysqld: loopback only, no performance_schema (about 250 MB resident less), a small
	// buffer pool. Durability settings stay Vitess's (sync_binlog and
	// innodb_flush_log_at_trx_commit at MySQL's defaults of 1), as production runs them.
	cnf := fmt.Sprintf("[mysqld]\nbind-address = 127.0.0.1\nperformance_schema = OFF\ninnodb_buffer_pool_size = %s\ninnodb_redo_log_capacity = 64M\nmax_connections = 600\n",
		cmp.Or(cfg.BufferPool, DefaultBufferPool))
	if err := os.WriteFile(filepath.Join(tmp, "extra.cnf"), []byte(cnf), 0o644); err != nil {
		return nil, fmt.Errorf("vitesscluster: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "vschema.json"), cfg.VSchema, 0o644); err != nil {
		return nil, fmt.Errorf("vitesscluster: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := vitessdb.ChownTree(tmp, 65534, 65534); err != nil {
			return nil, fmt.Errorf("vitesscluster: hand %s to nobody: %w", tmp, err)
		}
	}
	c.env = append(os.Environ(),
		"VTROOT="+cfg.VitessDir,
		"VT_MYSQL_ROOT="+filepath.Join(cfg.VitessDir, "mysql"),
		"VTDATAROOT="+data,
		"TMPDIR="+filepath.Join(data, "tmp"),
		"HOME="+data,
		"EXTRA_MY_CNF="+filepath.Join(tmp, "extra.cnf"),
	)

	ports, err := freePorts(8 + 3*perShard*len(ShardNames))
	if err != nil {
		return nil, err
	}
	next := func() int { p := ports[0]; ports = ports[1:]; return p }
	etcdPort, etcdPeer := next(), next()
	vtctldHTTP, vtctldGRPC := next(), next()
	vtgateHTTP, vtgateGRPC, vtgateMySQL := next(), next(), next()
	c.etcdAddr = "127.0.0.1:" + strconv.Itoa(etcdPort)
	c.vtctldGRPC = "127.0.0.1:" + strconv.Itoa(vtctldGRPC)
	c.VTGate = "127.0.0.1:" + strconv.Itoa(vtgateMySQL)
	for si, shard := range ShardNames {
		for i := range perShard {
			uid := 100*(si+1) + i
			c.Tablets = append(c.Tablets, &Tablet{Alias: fmt.Sprintf("%s-%010d", Cell, uid), UID: uid, Shard: shard,
				MySQLPort: next(), Port: next(), GRPCPort: next(), dir: filepath.Join(data, fmt.Sprintf("vt_%010d", uid))})
		}
	}

	step := time.Now()
	done := func(what string) {
		c.logf("vitesscluster: %s in %v", what, time.Since(step).Round(time.Millisecond))
		step = time.Now()
	}

	// etcd, the topology server, and the cell.
	peer := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	if _, err := c.start("etcd", cfg.Etcd, "--name=mend", "--data-dir="+filepath.Join(tmp, "etcd", "data"),
		"--listen-client-urls=http://"+c.etcdAddr, "--advertise-client-urls=http://"+c.etcdAddr,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=mend="+peer,
		"--enable-v2=false"); err != nil {
		return nil, err
	}
	if err := c.waitHTTP(ctx, "etcd", "http://"+c.etcdAddr+"/health"); err != nil {
		return nil, err
	}
	if _, err := c.vtctl(ctx, append([]string{"--server=internal"}, append(c.topoFlags(),
		"AddCellInfo", "--root=/vitess/"+Cell, "--server-address="+c.etcdAddr, Cell)...)...); err != nil {
		return nil, err
	}
	done("etcd up, cell " + Cell + " added")

	// vtctld.
	if _, err := c.start("vtctld", c.bin("vtctld"), append(c.topoFlags(), append(c.serveFlags(vtctldHTTP, vtctldGRPC),
		"--cell="+Cell, "--service-map=grpc-vtctl,grpc-vtctld")...)...); err != nil {
		return nil, err
	}
	if err := c.waitHTTP(ctx, "vtctld", fmt.Sprintf("http://127.0.0.1:%d/debug/status", vtctldHTTP)); err != nil {
		return nil, err
	}
	if _, err := c.Vtctld(ctx, "CreateKeyspace", "--durability-policy="+Durability, c.Keyspace); err != nil {
		return nil, err
	}
	done("vtctld up, keyspace " + c.Keyspace + " created (durability " + Durability + ")")

	// Every mysqld, initialised in parallel.
	errs := make(chan error, len(c.Tablets))
	for _, t := range c.Tablets {
		go func() {
			_, err := c.run(ctx, "mysqlctl-init-"+strconv.Itoa(t.UID), c.bin("mysqlctl"), "--tablet-uid="+strconv.Itoa(t.UID),
				"--mysql-port="+strconv.Itoa(t.MySQLPort), "--log_dir="+filepath.Join(tmp, "logs"), "init")
			errs <- err
		}()
	}
	for range c.Tablets {
		if e := <-errs; e != nil {
			err = errors.Join(err, e)
		}
	}
	if err != nil {
		return nil, err
	}
	done(fmt.Sprintf("%d mysqld initialised", len(c.Tablets)))

	// One vttablet per mysqld, all replicas until the reparents below.
	for _, t := range c.Tablets {
		if err := c.startTablet(t); err != nil {
			return nil, err
		}
	}
	for _, t := range c.Tablets {
		if err := c.waitHTTP(ctx, "vttablet "+t.Alias, fmt.Sprintf("http://127.0.0.1:%d/debug/status", t.Port)); err != nil {
			return nil, err
		}
	}
	done(fmt.Sprintf("%d vttablets up", len(c.Tablets)))

	// Elect each shard's first tablet (PlannedReparentShard initialises a shard that never had
	// a primary), retried while the tablets are still registering.
	for si, shard := range ShardNames {
		first := c.Tablets[si*perShard]
		if err := retry(ctx, func() error {
			_, err := c.Vtctld(ctx, "PlannedReparentShard", "--new-primary="+first.Alias, c.Keyspace+"/"+shard)
			return err
		}); err != nil {
			return nil, err
		}
	}
	done("primaries elected")

	// mend's schema on each primary: it replicates to the replicas.
	for si := range ShardNames {
		if err := c.applySchema(ctx, c.Tablets[si*perShard], cfg.Schema); err != nil {
			return nil, err
		}
	}
	if _, err := c.Vtctld(ctx, "ReloadSchemaKeyspace", "--include-primary", c.Keyspace); err != nil {
		return nil, err
	}
	if _, err := c.Vtctld(ctx, "ApplyVSchema", "--vschema-file="+filepath.Join(tmp, "vschema.json"), c.Keyspace); err != nil {
		return nil, err
	}
	done("schema and vschema applied")

	// vtgate.
	if _, err := c.start("vtgate", c.bin("vtgate"), append(c.topoFlags(), append(c.serveFlags(vtgateHTTP, vtgateGRPC),
		"--cell="+Cell, "--cells-to-watch="+Cell, "--tablet-types-to-wait=PRIMARY,REPLICA",
		"--mysql-server-port="+strconv.Itoa(vtgateMySQL), "--mysql-server-bind-address=127.0.0.1",
		"--mysql-auth-server-impl=none", "--service-map=grpc-vtgateservice",
		// Queries wait through a planned reparent instead of failing (production's setting).
		"--enable-buffer",
		// As vitessdb: a transaction that would write to a second shard fails.
		"--transaction-mode=SINGLE")...)...); err != nil {
		return nil, err
	}
	if err := retry(ctx, func() error { return c.ping(ctx) }); err != nil {
		return nil, err
	}
	done("vtgate serves every shard")
	c.StartedIn = time.Since(begin)
	return c, nil
}

// ping runs a scatter read of mend's tables through vtgate: it answers once every shard's
// primary serves them.
func (c *Cluster) ping(ctx context.Context) error {
	db, err := sql.Open("mysql", c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int64
	return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM mend_leases").Scan(&n)
}

func (c *Cluster) startTablet(t *Tablet) error {
	p, err := c.start("vttablet-"+strconv.Itoa(t.UID), c.bin("vttablet"), append(c.topoFlags(), append(c.serveFlags(t.Port, t.GRPCPort),
		"--tablet-path="+t.Alias, "--tablet-hostname=127.0.0.1",
		"--init-keyspace="+c.Keyspace, "--init-shard="+t.Shard, "--init-tablet-type=replica",
		"--service-map=grpc-queryservice,grpc-tabletmanager,grpc-updatestream",
		"--health-check-interval=1s", "--pid-file="+filepath.Join(t.dir, "vttablet.pid"))...)...)
	if err != nil {
		return err
	}
	t.proc = p
	return nil
}

// applySchema creates the keyspace's database on t (a primary) and runs stmts in it, through
// mysqld's socket as vt_dba; the binary log carries them to the shard's replicas.
func (c *Cluster) applySchema(ctx context.Context, t *Tablet, stmts []string) error {
	db, err := sql.Open("mysql", c.TabletConfig(t, "").FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("vitesscluster: schema on %s: %w", t.Alias, err)
	}
	defer conn.Close()
	name := c.DBName()
	all := append([]string{"CREATE DATABASE IF NOT EXISTS `" + name + "`", "USE `" + name + "`"}, stmts...)
	for _, s := range all {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("vitesscluster: schema on %s: %w\n%s", t.Alias, err, s)
		}
	}
	return nil
}

// DBName is the keyspace's database on every mysqld (vt_KEYSPACE, Vitess's default).
func (c *Cluster) DBName() string { return "vt_" + c.Keyspace }

// TabletConfig returns a driver config for t's mysqld through its socket as vt_dba, database db
// (DBName when empty): for checks of where rows are, never for mend's statements.
func (c *Cluster) TabletConfig(t *Tablet, db string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "vt_dba"
	cfg.Net = "unix"
	cfg.Addr = t.Socket()
	cfg.DBName = cmp.Or(db, c.DBName())
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg
}

// DSN returns a DSN for the keyspace through vtgate (parseTime, UTC, client-side
// interpolation, as the harness's other DSNs).
func (c *Cluster) DSN() string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = c.VTGate
	cfg.DBName = c.Keyspace
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	return cfg.FormatDSN()
}

// ShardOf returns the shard vtgate routes key to under the keyspace's vindex.
func (c *Cluster) ShardOf(ctx context.Context, vindex, key string) (string, error) {
	db, err := sql.Open("mysql", c.DSN())
	if err != nil {
		return "", fmt.Errorf("vitesscluster: %w", err)
	}
	defer db.Close()
	var shard string
	if err := db.QueryRowContext(ctx, "SELECT shard FROM `"+vindex+"` WHERE id = ?", key).Scan(&shard); err != nil {
		return "", fmt.Errorf("vitesscluster: shard of %q under %s: %w", key, vindex, err)
	}
	return shard, nil
}

// SemiSync reports t's mysqld's semi-sync settings as it runs them: whether it waits for a
// replica's acknowledgement as a source (rpl_semi_sync_source_enabled), whether it sends them
// as a replica (rpl_semi_sync_replica_enabled), and how many replicas acknowledge it now
// (Rpl_semi_sync_source_clients).
func (c *Cluster) SemiSync(ctx context.Context, t *Tablet) (source, replica bool, clients int, err error) {
	db, err := sql.Open("mysql", c.TabletConfig(t, "mysql").FormatDSN())
	if err != nil {
		return false, false, 0, err
	}
	defer db.Close()
	var src, rep int
	if err := db.QueryRowContext(ctx, "SELECT @@global.rpl_semi_sync_source_enabled, @@global.rpl_semi_sync_replica_enabled").Scan(&src, &rep); err != nil {
		return false, false, 0, fmt.Errorf("vitesscluster: semi-sync of %s: %w", t.Alias, err)
	}
	var name string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_source_clients'").Scan(&name, &clients); err != nil {
		return false, false, 0, fmt.Errorf("vitesscluster: semi-sync clients of %s: %w", t.Alias, err)
	}
	return src == 1, rep == 1, clients, nil
}

// Vtctld runs vtctldclient against the cluster's vtctld with args and returns its output.
func (c *Cluster) Vtctld(ctx context.Context, args ...string) (string, error) {
	return c.vtctl(ctx, append([]string{"--server=" + c.vtctldGRPC}, args...)...)
}

func (c *Cluster) vtctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin("vtctldclient"), args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("vitesscluster: vtctldclient %s: %w\n%s", strings.Join(args, " "), err, tail(out.String(), 3000))
	}
	return out.String(), nil
}

// Primary returns shard's primary as the topology names it.
func (c *Cluster) Primary(ctx context.Context, shard string) (*Tablet, error) {
	out, err := c.Vtctld(ctx, "GetTablets", "--keyspace="+c.Keyspace, "--shard="+shard)
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[3] == "primary" {
			for _, t := range c.Tablets {
				if t.Alias == f[0] {
					return t, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("vitesscluster: shard %s has no primary:\n%s", shard, out)
}

// PlannedReparent moves shard's primary to one of its replicas (PlannedReparentShard: the old
// primary stops taking writes, a replica catches up and is promoted, the old primary becomes a
// replica) and returns the new primary.
func (c *Cluster) PlannedReparent(ctx context.Context, shard string) (*Tablet, error) {
	if _, err := c.Vtctld(ctx, "PlannedReparentShard", "--wait-replicas-timeout=60s", c.Keyspace+"/"+shard); err != nil {
		return nil, err
	}
	return c.Primary(ctx, shard)
}

// KillPrimary sends SIGKILL to shard's primary mysqld and its vttablet, as a machine that
// dies would, and returns the tablet. The shard then has no primary until EmergencyReparent.
func (c *Cluster) KillPrimary(ctx context.Context, shard string) (*Tablet, error) {
	t, err := c.Primary(ctx, shard)
	if err != nil {
		return nil, err
	}
	pid, err := t.MySQLPid()
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("vitesscluster: kill mysqld %d of %s: %w", pid, t.Alias, err)
	}
	_ = syscall.Kill(-t.proc.cmd.Process.Pid, syscall.SIGKILL)
	if err := vitessdb.WaitGone(func() bool { return vitessdb.ProcessAlive(pid) }); err != nil {
		return nil, fmt.Errorf("vitesscluster: mysqld %d of %s: %w", pid, t.Alias, err)
	}
	<-t.proc.exited
	c.mu.Lock()
	t.killed = true
	c.mu.Unlock()
	return t, nil
}

// Alive returns how many of shard's tablets KillPrimary has not killed.
func (c *Cluster) Alive(shard string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.Tablets {
		if t.Shard == shard && !t.killed {
			n++
		}
	}
	return n
}

// EmergencyReparent promotes the most advanced reachable replica of shard
// (EmergencyReparentShard) and returns it: for a shard whose primary is dead. Then it removes
// the shard's killed tablets from the topology (DeleteTablets), as an operator retires a dead
// machine: a tablet that cannot be reached fails every later PlannedReparentShard of its shard.
func (c *Cluster) EmergencyReparent(ctx context.Context, shard string) (*Tablet, error) {
	if _, err := c.Vtctld(ctx, "EmergencyReparentShard", "--wait-replicas-timeout=60s", c.Keyspace+"/"+shard); err != nil {
		return nil, err
	}
	c.mu.Lock()
	var dead []string
	for _, t := range c.Tablets {
		if t.Shard == shard && t.killed {
			dead = append(dead, t.Alias)
		}
	}
	c.mu.Unlock()
	if len(dead) > 0 {
		if _, err := c.Vtctld(ctx, append([]string{"DeleteTablets", "--allow-primary"}, dead...)...); err != nil {
			return nil, err
		}
	}
	return c.Primary(ctx, shard)
}

// RSS returns the resident memory of every process of the cluster, summed (bytes), and how
// many processes that is.
func (c *Cluster) RSS() (int64, int) {
	var sum int64
	pids := vitessdb.PIDsUsing(c.Dir)
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					sum += kb * 1024
				}
			}
		}
	}
	return sum, len(pids)
}

// Close kills every process of the cluster and removes its directory. Idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		procs := c.procs
		c.mu.Unlock()
		for _, p := range procs {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
		for _, p := range procs {
			<-p.exited
		}
		for _, pid := range vitessdb.PIDsUsing(c.Dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if err := vitessdb.WaitGone(func() bool { return vitessdb.ProcessAlive(pid) }); err != nil {
				c.closeErr = errors.Join(c.closeErr, fmt.Errorf("vitesscluster: process %d: %w", pid, err))
			}
		}
		if c.Dir != "" {
			c.closeErr = errors.Join(c.closeErr, os.RemoveAll(c.Dir))
		}
	})
	return c.closeErr
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.vitessDir, "bin", name) }

func (c *Cluster) topoFlags() []string {
	return []string{"--topo-implementation=etcd2", "--topo-global-server-address=" + c.etcdAddr, "--topo-global-root=/vitess/global"}
}

// serveFlags are a Vitess server's ports, loopback only, and its log directory.
func (c *Cluster) serveFlags(port, grpc int) []string {
	return []string{"--port=" + strconv.Itoa(port), "--grpc-port=" + strconv.Itoa(grpc),
		"--bind-address=127.0.0.1", "--grpc-bind-address=127.0.0.1", "--log_dir=" + filepath.Join(c.Dir, "logs")}
}

// command builds a command that runs as nobody when the caller is root, in a process group of
// its own, its output in logs/NAME.log; ctx's end kills it.
func (c *Cluster) command(ctx context.Context, name, bin string, args ...string) (*exec.Cmd, string, error) {
	argv := append([]string{bin}, args...)
	if os.Geteuid() == 0 {
		argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(c.Dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("vitesscluster: %w", err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	return cmd, logPath, nil
}

// start runs a long-lived process.
func (c *Cluster) start(name, bin string, args ...string) (*proc, error) {
	// Not tied to a caller's context: the process lives until KillPrimary or Close.
	cmd, logPath, err := c.command(context.Background(), name, bin, args...)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cmd.Stdout.(*os.File).Close()
		return nil, fmt.Errorf("vitesscluster: start %s: %w", name, err)
	}
	cmd.Stdout.(*os.File).Close()
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// run runs a process to its end (mysqlctl init).
func (c *Cluster) run(ctx context.Context, name, bin string, args ...string) (string, error) {
	cmd, logPath, err := c.command(ctx, name, bin, args...)
	if err != nil {
		return "", err
	}
	err = cmd.Run()
	cmd.Stdout.(*os.File).Close()
	if err != nil {
		b, _ := os.ReadFile(logPath)
		return "", fmt.Errorf("vitesscluster: %s: %w\n%s", name, err, tail(string(b), 3000))
	}
	return logPath, nil
}

// waitHTTP polls url until it answers 200, failing early if the process named name exited.
func (c *Cluster) waitHTTP(ctx context.Context, name, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	err := retry(ctx, func() error {
		if p := c.proc(name); p != nil {
			select {
			case <-p.exited:
				b, _ := os.ReadFile(p.log)
				return &exitedError{fmt.Errorf("vitesscluster: %s exited: %v\n%s", name, p.cmd.ProcessState, tail(string(b), 3000))}
			default:
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vitesscluster: %s not ready: %w", name, err)
	}
	return nil
}

func (c *Cluster) proc(name string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name || "vttablet "+strings.TrimPrefix(p.name, "vttablet-") == name {
			return p
		}
	}
	return nil
}

// exitedError stops retry at once.
type exitedError struct{ error }

func (e *exitedError) Unwrap() error { return e.error }

// retry calls f until it succeeds, ctx ends, or f reports an exitedError. It polls a process
// coming up (not a test's synchronisation): 100 ms apart, the last error returned.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		var exited *exitedError
		if errors.As(err, &exited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts picks n distinct ports in [20000, 32000) that are free on every interface now (the
// ephemeral range starts at 32768, where a client socket could take one before the bind).
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n {
			return nil, errors.New("vitesscluster: not enough free ports below 32000")
		}
		p := 20000 + rand.IntN(12000)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
