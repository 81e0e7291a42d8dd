ALTER TABLE mend_records DROP INDEX mend_records_failing
