package binlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// The reader's GTID sets. go-mysql's MySQL set has no room for tagged GTIDs
// (MySQL 8.3+: uuid:tag:n), so a set read past one would lack it, and a
// resume by GTID would ask the server for every tagged transaction again:
// from a purged file, a false "purged". mysqlSet keeps tags, prints MySQL's
// text form and encodes COM_BINLOG_DUMP_GTID's binary form (the tagged
// format when it holds a tag). MariaDB's connect state is one GTID per
// domain, the last committed there (mariaState); a set with two server_ids
// in one domain (a primary that once replicated another) is refused by the
// server (ERROR 1943).

// tsid is a GTID's source: the server's UUID and a tag ("" untagged).
type tsid struct {
	sid uuid.UUID
	tag string
}

// interval is [start, stop) of transaction numbers.
type interval struct{ start, stop int64 }

// mysqlSet is a MySQL GTID set, tagged GTIDs included. It implements
// gomysql.GTIDSet.
type mysqlSet struct {
	m map[tsid][]interval // each sorted, merged, non-empty
}

var _ gomysql.GTIDSet = (*mysqlSet)(nil)

func newMySQLSet() *mysqlSet { return &mysqlSet{m: map[tsid][]interval{}} }

// parseMySQLSet parses MySQL's text form: uuid(:interval|:tag)* sets
// separated by commas, an interval n or n-m, a tag switching the tag of
// the intervals after it (gtid_executed prints "uuid:1-5:mytag:1-2").
func parseMySQLSet(s string) (*mysqlSet, error) {
	g := newMySQLSet()
	return g, g.Update(s)
}

// Update adds the GTIDs of s (text form) to g.
func (g *mysqlSet) Update(s string) error {
	s = strings.Join(strings.Fields(s), "")
	if s == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		fields := strings.Split(part, ":")
		sid, err := uuid.Parse(fields[0])
		if err != nil {
			return fmt.Errorf("binlog: GTID set %q: %q is not a server UUID", s, fields[0])
		}
		tag := ""
		for _, f := range fields[1:] {
			lo, hi, ok := parseInterval(f)
			if !ok {
				if !validTag(f) {
					return fmt.Errorf("binlog: GTID set %q: %q is neither an interval nor a tag", s, f)
				}
				tag = strings.ToLower(f)
				continue
			}
			g.add(tsid{sid, tag}, lo, hi+1)
		}
	}
	return nil
}

func parseInterval(f string) (lo, hi int64, ok bool) {
	a, b, isRange := strings.Cut(f, "-")
	lo, err := strconv.ParseInt(a, 10, 64)
	if err != nil || lo < 1 {
		return 0, 0, false
	}
	hi = lo
	if isRange {
		if hi, err = strconv.ParseInt(b, 10, 64); err != nil || hi < lo {
			return 0, 0, false
		}
	}
	return lo, hi, true
}

// validTag is MySQL's tag syntax: a letter or underscore, then letters,
// digits and underscores, at most 32.
func validTag(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// add adds [start, stop) of k.
func (g *mysqlSet) add(k tsid, start, stop int64) {
	ivs := append(g.m[k], interval{start, stop})
	slices.SortFunc(ivs, func(a, b interval) int { return int(min(max(a.start-b.start, -1), 1)) })
	out := ivs[:1]
	for _, iv := range ivs[1:] {
		last := &out[len(out)-1]
		if iv.start <= last.stop {
			last.stop = max(last.stop, iv.stop)
			continue
		}
		out = append(out, iv)
	}
	g.m[k] = out
}

// addGTID adds one transaction.
func (g *mysqlSet) addGTID(sid uuid.UUID, tag string, gno int64) {
	if planted.dropTags && tag != "" {
		return
	}
	g.add(tsid{sid, strings.ToLower(tag)}, gno, gno+1)
}

// keys are g's sources in MySQL's order: by UUID, the untagged first, then
// by tag.
func (g *mysqlSet) keys() []tsid {
	ks := make([]tsid, 0, len(g.m))
	for k := range g.m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b tsid) int {
		if c := bytes.Compare(a.sid[:], b.sid[:]); c != 0 {
			return c
		}
		return strings.Compare(a.tag, b.tag)
	})
	return ks
}

// String is MySQL's text form.
func (g *mysqlSet) String() string {
	var b strings.Builder
	var prev uuid.UUID
	for i, k := range g.keys() {
		if i == 0 || k.sid != prev {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(k.sid.String())
			prev = k.sid
		}
		if k.tag != "" {
			b.WriteByte(':')
			b.WriteString(k.tag)
		}
		for _, iv := range g.m[k] {
			if iv.stop-1 == iv.start {
				fmt.Fprintf(&b, ":%d", iv.start)
			} else {
				fmt.Fprintf(&b, ":%d-%d", iv.start, iv.stop-1)
			}
		}
	}
	return b.String()
}

// Encode is the set as COM_BINLOG_DUMP_GTID carries it: the count of
// sources and, per source, its UUID, its tag in the tagged format (used
// only when the set holds a tag: a length in MySQL's variable-length
// encoding, then the bytes) and its intervals as [start, stop) pairs.
func (g *mysqlSet) Encode() []byte {
	ks := g.keys()
	tagged := slices.ContainsFunc(ks, func(k tsid) bool { return k.tag != "" })
	var buf bytes.Buffer
	n := uint64(len(ks))
	if tagged {
		_ = binary.Write(&buf, binary.LittleEndian, uint64(1)<<56|n<<8|1)
	} else {
		_ = binary.Write(&buf, binary.LittleEndian, n)
	}
	for _, k := range ks {
		buf.Write(k.sid[:])
		if tagged {
			buf.WriteByte(byte(len(k.tag) << 1)) // tags are at most 32 bytes: one byte of varlen
			buf.WriteString(k.tag)
		}
		ivs := g.m[k]
		_ = binary.Write(&buf, binary.LittleEndian, uint64(len(ivs)))
		for _, iv := range ivs {
			_ = binary.Write(&buf, binary.LittleEndian, iv.start)
			_ = binary.Write(&buf, binary.LittleEndian, iv.stop)
		}
	}
	return buf.Bytes()
}

// Contain reports whether every GTID of o is in g.
func (g *mysqlSet) Contain(o gomysql.GTIDSet) bool {
	other, ok := o.(*mysqlSet)
	if !ok {
		return false
	}
	for k, ivs := range other.m {
		have := g.m[k]
		for _, iv := range ivs {
			if !slices.ContainsFunc(have, func(h interval) bool { return h.start <= iv.start && iv.stop <= h.stop }) {
				return false
			}
		}
	}
	return true
}

// Equal reports whether g and o hold the same GTIDs.
func (g *mysqlSet) Equal(o gomysql.GTIDSet) bool {
	other, ok := o.(*mysqlSet)
	return ok && g.Contain(other) && other.Contain(g)
}

// Clone copies g.
func (g *mysqlSet) Clone() gomysql.GTIDSet {
	c := newMySQLSet()
	for k, ivs := range g.m {
		c.m[k] = slices.Clone(ivs)
	}
	return c
}

// IsEmpty reports whether g holds no GTID.
func (g *mysqlSet) IsEmpty() bool { return len(g.m) == 0 }

// mariaState reduces a MariaDB GTID set to a connect state: per domain,
// the GTID with the highest sequence number (the last committed there;
// sequence numbers grow within a domain whichever server wrote them).
func mariaState(s *gomysql.MariadbGTIDSet) {
	if planted.gtidPerServer {
		return
	}
	for domain, byServer := range s.Sets {
		var last *gomysql.MariadbGTID
		for _, g := range byServer {
			if last == nil || g.SequenceNumber > last.SequenceNumber ||
				(g.SequenceNumber == last.SequenceNumber && g.ServerID > last.ServerID) {
				last = g
			}
		}
		s.Sets[domain] = map[uint32]*gomysql.MariadbGTID{last.ServerID: last}
	}
}

// parseGTIDSet parses a set in flavor's text form: a mysqlSet for MySQL,
// a connect state for MariaDB.
func parseGTIDSet(flavor, s string) (gomysql.GTIDSet, error) {
	if flavor == gomysql.MySQLFlavor {
		return parseMySQLSet(s)
	}
	set, err := gomysql.ParseMariadbGTIDSet(s)
	if err != nil {
		return nil, err
	}
	m := set.(*gomysql.MariadbGTIDSet)
	mariaState(m)
	return m, nil
}

// GTIDContains reports whether GTID set contains sub, both in flavor's
// text form (MySQL's tagged GTIDs included); false when either does not
// parse. For MariaDB, whose sets are connect states, per domain.
func GTIDContains(flavor, set, sub string) bool {
	if flavor != gomysql.MySQLFlavor {
		return mariaContains(set, sub)
	}
	a, err := parseGTIDSet(flavor, set)
	if err != nil {
		return false
	}
	b, err := parseGTIDSet(flavor, sub)
	if err != nil {
		return false
	}
	return a.Contain(b)
}

// mariaContains compares MariaDB connect states: set has, in every domain
// of sub, a sequence number at least sub's.
func mariaContains(set, sub string) bool {
	a, err := parseGTIDSet(gomysql.MariaDBFlavor, set)
	if err != nil {
		return false
	}
	b, err := parseGTIDSet(gomysql.MariaDBFlavor, sub)
	if err != nil {
		return false
	}
	have := a.(*gomysql.MariadbGTIDSet)
	for domain, byServer := range b.(*gomysql.MariadbGTIDSet).Sets {
		for _, g := range byServer {
			var best uint64
			found := false
			for _, h := range have.Sets[domain] {
				best, found = max(best, h.SequenceNumber), true
			}
			if !found || best < g.SequenceNumber {
				return false
			}
		}
	}
	return true
}
