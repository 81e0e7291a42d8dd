-- failing_attempts (issue 46) is a record's attempts while its repair is failing (storage.FailingCondition: pending
-- or settled with attempts > 0) and NULL otherwise: a VIRTUAL column computed from state and attempts, so nothing is
-- stored and no writer names it. Migration 0018 indexes it for mend console's "failing now" (an index led by state
-- instead competed with the (state, ...) indexes for the other reads by state and took some of their plans).
-- Expand: a generated column, which no older binary's INSERT names; added INSTANT (metadata only). Alone in its
-- migration: MySQL builds an index on a virtual column added in the same ALTER only under a shared lock.
ALTER TABLE mend_records ADD COLUMN failing_attempts INT AS (CASE WHEN state IN ('pending', 'settled') AND attempts > 0 THEN attempts END) VIRTUAL
