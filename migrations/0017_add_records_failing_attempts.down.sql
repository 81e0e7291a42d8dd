ALTER TABLE mend_records DROP COLUMN failing_attempts
