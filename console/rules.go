package console

// pageRule is what the overview's "What would page" shows of one paging
// rule of the shipped rule file (deploy/prometheus/mend-alerts.yml,
// severity: page). TestPageRulesCovered walks the file and fails when a
// page rule has no entry here, or an entry names no page rule, so a new
// page rule cannot leave the console saying "Nothing would page" while it
// fires.
type pageRule struct {
	Rule string
	// Checked is what the overview says it checked when nothing would
	// page ("no record overdue past 10m0s"); the overview lists a row named
	// Rule (or Via) when the condition holds.
	Checked string
	// Via names the rule whose row shows this one's condition, when it is
	// another's (a wake-up that keeps failing is a repair that keeps
	// failing).
	Via string
	// When says which overviews can check it: "" always, "lag" with the
	// subscription's lag (mend console --queue-dsn), "binlog" with binlog
	// readers.
	When string
	// Unseen says why the console cannot see the condition: Prometheus's
	// view of the replicas alone has it. The overview names these rules
	// beside "Nothing would page".
	Unseen string
}

// pageRules are the shipped page rules, in the rule file's order.
var pageRules = []pageRule{
	{Rule: "MendRepairStuck", Checked: "no record overdue past 10m0s"},
	{Rule: "MendRepairsFailing", Checked: "no repair failing for over 30s"},
	{Rule: "MendNotReady", Unseen: "whether any replica is ready (its /readyz)"},
	{Rule: "MendAbsent", Unseen: "whether Prometheus scrapes any replica"},
	{Rule: "MendCannotReadDatabase", Unseen: "the replicas' reads of mend's tables (this page reads them too: it shows an error when it cannot)"},
	{Rule: "MendSubscriptionLagging", Checked: "no dead letter held back past 10m0s", When: "lag"},
	{Rule: "MendBinlogNotReading", Checked: "every binlog source read", When: "binlog"},
	{Rule: "MendBinlogPositionPurged", Checked: "no binlog position purged", When: "binlog"},
	{Rule: "MendWakeupsFailing", Via: "MendRepairsFailing"},
	{Rule: "MendRepairSLO", Checked: "no slow repair in the last 15 minutes"},
}

// nothingPages is what the overview says when no row would page: what it
// checked, and the page rules it cannot see.
type nothingPages struct {
	Checked []string
	Unseen  []pageRule
}

func nothingPaged(lagOn, binlogOn bool) nothingPages {
	var n nothingPages
	for _, r := range pageRules {
		switch {
		case r.Unseen != "":
			n.Unseen = append(n.Unseen, r)
		case r.Checked == "":
		case r.When == "lag" && !lagOn, r.When == "binlog" && !binlogOn:
		default:
			n.Checked = append(n.Checked, r.Checked)
		}
	}
	n.Checked = append(n.Checked, "nothing parked")
	return n
}
