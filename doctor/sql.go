package doctor

// The statements the checks run, each named for the processlist and the
// slow log. They only read: catalog tables and variables. (The privilege
// probes are EXPLAINs, listed with the tables they probe: database.go,
// host.go, subscription.go.)

const (
	serverVersionQuery = `-- name: DoctorServerVersion
SELECT VERSION(), @@version_comment`
	sqlModeQuery = `-- name: DoctorSQLMode
SELECT @@GLOBAL.sql_mode, @@SESSION.sql_mode`
	columnTypeQuery = `-- name: DoctorColumnType
SELECT data_type FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`
	hashIndexQuery = `-- name: DoctorHashIndexes
SELECT COUNT(*) FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name LIKE 'mend\_%' AND index_type <> 'BTREE'`
	engineQuery = `-- name: DoctorNonInnoDB
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name LIKE 'mend\_%' AND table_type = 'BASE TABLE' AND engine <> 'InnoDB'`
	clockQuery = `-- name: DoctorClock
SELECT @@GLOBAL.time_zone, @@system_time_zone,
	TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), NOW(6)), UTC_TIMESTAMP(6)`
	lockWaitQuery = `-- name: DoctorLockWait
SELECT @@SESSION.innodb_lock_wait_timeout`
	currentUserQuery = `-- name: DoctorCurrentUser
SELECT CURRENT_USER()`
	databaseQuery = `-- name: DoctorDatabase
SELECT DATABASE()`
	showGrantsQuery = `-- name: DoctorShowGrants
SHOW GRANTS`
	versionQuery = `-- name: DoctorVersion
SELECT @@version`
	defaultCollationQuery = `-- name: DoctorDefaultCollation
SELECT COLLATION(CONVERT('' USING utf8mb4))`
	snapshotIsolationQuery = `-- name: DoctorSnapshotIsolation
SELECT @@GLOBAL.innodb_snapshot_isolation`
	tableColumnsQuery = `-- name: DoctorTableColumns
SELECT column_name FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ?`
	uniqueKeysQuery = `-- name: DoctorUniqueKeys
SELECT index_name, column_name FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ? AND non_unique = 0
ORDER BY index_name, seq_in_index`
	// padsQueryHead + a collation name (checked against collationName:
	// a name cannot be a parameter) + padsQueryTail.
	padsQueryHead = `-- name: DoctorCollationPads
SELECT _utf8mb4'a' COLLATE `
	padsQueryTail = ` = _utf8mb4'a '`
)
