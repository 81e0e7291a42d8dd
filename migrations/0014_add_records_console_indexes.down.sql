ALTER TABLE mend_records DROP INDEX mend_records_queue_state, DROP INDEX mend_records_recent
