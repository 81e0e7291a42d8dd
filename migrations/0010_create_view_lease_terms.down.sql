DROP VIEW IF EXISTS mend_lease_terms
