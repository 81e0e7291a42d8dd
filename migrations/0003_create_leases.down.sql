DROP TABLE mend_leases
