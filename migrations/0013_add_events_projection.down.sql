ALTER TABLE mend_events DROP COLUMN next_attempt_at, DROP COLUMN last_error, DROP COLUMN attempts, DROP COLUMN state
