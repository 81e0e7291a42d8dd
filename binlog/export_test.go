package binlog

// Plant turns on the planted variant named (see planted) until the returned
// function runs.
func Plant(name string) (undo func()) {
	flags := map[string]*bool{"saveBeforeRecord": &planted.saveBeforeRecord, "dropOnFailure": &planted.dropOnFailure,
		"startAtEnd": &planted.startAtEnd, "recordRollbacks": &planted.recordRollbacks, "saveMidTransaction": &planted.saveMidTransaction,
		"offsetWatermark": &planted.offsetWatermark, "resumeFromRead": &planted.resumeFromRead,
		"parkCountPerTerm": &planted.parkCountPerTerm, "parkOneLate": &planted.parkOneLate, "noParkDefault": &planted.noParkDefault, "staleCredentials": &planted.staleCredentials,
		"exactSchemaName": &planted.exactSchemaName, "anySchema": &planted.anySchema, "ignoreFilters": &planted.ignoreFilters, "ignoreStatements": &planted.ignoreStatements, "trustFileName": &planted.trustFileName, "trustHeartbeats": &planted.trustHeartbeats, "trustStreamServer": &planted.trustStreamServer, "ignoreXA": &planted.ignoreXA,
		"gtidPerServer": &planted.gtidPerServer, "dropTags": &planted.dropTags, "gtidFrozen": &planted.gtidFrozen,
		"saveWhilePending": &planted.saveWhilePending, "skipProblems": &planted.skipProblems,
		"resumeFileAnywhere": &planted.resumeFileAnywhere, "everyResetPurged": &planted.everyResetPurged, "flushDeadlineSlides": &planted.flushDeadlineSlides, "returnOnProblem": &planted.returnOnProblem}
	f, ok := flags[name]
	if !ok {
		panic("binlog: no planted variant " + name)
	}
	*f = true
	return func() { *f = false }
}
