DROP TABLE mend_events
