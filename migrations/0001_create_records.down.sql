DROP TABLE mend_records
