-- A covering index for the repairs failing now (issue 46): the failing records (failing_attempts, migration 0017, is
-- NULL for every other) by their failed attempts, with what mend console's "failing now" shows. The overview reads
-- them as a backward, bounded, index-only range that holds failing records only, the most attempts first (before,
-- it read each open state's 1,000 most recently changed records and looked up their attempts by primary key, which
-- could miss a failing record behind busy ones). state_since is the one "failing for" both mend status and the
-- console show. Expand: a non-unique index, which no older binary notices; added online (INPLACE, LOCK=NONE).
ALTER TABLE mend_records ADD INDEX mend_records_failing (failing_attempts, updated_at, state_since, next_attempt_at, queue)
