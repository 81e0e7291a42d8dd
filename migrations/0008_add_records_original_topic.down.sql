ALTER TABLE mend_records DROP COLUMN original_topic
