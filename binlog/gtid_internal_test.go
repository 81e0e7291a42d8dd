package binlog

import (
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// MySQL's text form, tagged GTIDs included, parses, prints canonically
// (by UUID, untagged first, intervals merged) and survives the binary form
// COM_BINLOG_DUMP_GTID and Previous_gtids carry.
func TestMySQLSetRoundTrip(t *testing.T) {
	t.Parallel()
	const a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "0a0b0c0d-0000-4000-8000-000000000001"
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{a + ":1-5", a + ":1-5"},
		{a + ":1-5:7,\n" + a + ":6", a + ":1-7"},
		{a + ":1-5:Mend_Tag:1-3:5", a + ":1-5:mend_tag:1-3:5"},
		{a + ":mendtag:2", a + ":mendtag:2"},
		{a + ":1-2," + b + ":onlytagged:4-9", b + ":onlytagged:4-9," + a + ":1-2"},
	} {
		g, err := parseMySQLSet(tt.in)
		if err != nil {
			t.Fatalf("parse %q: %v", tt.in, err)
		}
		if got := g.String(); got != tt.want {
			t.Errorf("parse %q printed %q; want %q", tt.in, got, tt.want)
		}
		back, err := decodeSet(append(g.Encode(), 0xde, 0xad, 0xbe, 0xef)) // a checksum after it
		if err != nil {
			t.Fatalf("decode the encoding of %q: %v", tt.in, err)
		}
		if !back.Equal(g) {
			t.Errorf("%q encoded and decoded is %q", tt.in, back.String())
		}
	}
	for _, bad := range []string{"not-a-uuid:1", a + ":0", a + ":5-2", a + ":9tag:1", a + ":" + string(make([]byte, 33))} {
		if _, err := parseMySQLSet(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
}

// Containment counts tags: a set without a tagged GTID does not hold it,
// which is how a purge of tagged GTIDs once read as "purged".
func TestMySQLSetContainsTags(t *testing.T) {
	t.Parallel()
	const a = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, tt := range []struct {
		set, sub string
		want     bool
	}{
		{a + ":1-10:t:1-3", a + ":1-5:t:2", true},
		{a + ":1-10", a + ":1-5:t:2", false},
		{a + ":1-10:t:1", a + ":t:1-2", false},
		{a + ":1-10", "", true},
	} {
		if got := GTIDContains(gomysql.MySQLFlavor, tt.set, tt.sub); got != tt.want {
			t.Errorf("GTIDContains(%q, %q) = %v; want %v", tt.set, tt.sub, got, tt.want)
		}
	}
}

// A MariaDB set with two server_ids in a domain reduces to the connect
// state the server accepts: per domain, the last GTID committed there.
func TestMariaDBConnectState(t *testing.T) {
	t.Parallel()
	set, err := parseGTIDSet(gomysql.MariaDBFlavor, "0-1-100,0-7-90,1-3-5")
	if err != nil {
		t.Fatal(err)
	}
	m := set.(*gomysql.MariadbGTIDSet)
	if len(m.Sets[0]) != 1 || m.Sets[0][1] == nil || m.Sets[0][1].SequenceNumber != 100 || m.Sets[1][3] == nil {
		t.Fatalf("connect state %q; want 0-1-100 and 1-3-5", m.String())
	}
	if !GTIDContains(gomysql.MariaDBFlavor, "0-7-101,1-3-5", "0-1-100,1-3-5") || GTIDContains(gomysql.MariaDBFlavor, "0-1-100", "0-1-100,1-3-5") {
		t.Fatal("MariaDB containment is per domain, by sequence number")
	}
}

func FuzzMySQLSet(f *testing.F) {
	f.Add("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:tag:1-3")
	f.Add("0a0b0c0d-0000-4000-8000-000000000001:x:4")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseMySQLSet(s)
		if err != nil {
			return
		}
		again, err := parseMySQLSet(g.String())
		if err != nil || !again.Equal(g) {
			t.Fatalf("%q printed %q, which parses to %v (%v)", s, g.String(), again, err)
		}
		back, err := decodeSet(g.Encode())
		if err != nil || !back.Equal(g) {
			t.Fatalf("%q encoded does not decode to itself (%v)", s, err)
		}
	})
}
