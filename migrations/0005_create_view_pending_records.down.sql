DROP VIEW IF EXISTS mend_pending_records
