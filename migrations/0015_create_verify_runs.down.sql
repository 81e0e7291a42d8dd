DROP TABLE mend_verify_runs
