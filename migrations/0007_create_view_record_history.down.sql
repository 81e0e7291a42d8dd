DROP VIEW IF EXISTS mend_record_history
