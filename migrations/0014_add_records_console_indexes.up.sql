-- Two covering indexes for mend console's overview (issue 33), so its reads at scale are index-only range scans:
-- mend_records_recent serves the last hour's repairs (latency percentiles, the per-minute chart, slow repairs) and
-- the parked records by age; mend_records_queue_state serves one page of queues' counts by state, oldest due and
-- oldest open, and their repairs of the last hour. Expand: non-unique indexes, which no older binary notices; added online (INPLACE, LOCK=NONE).
ALTER TABLE mend_records ADD INDEX mend_records_recent (state, updated_at, failed_at, created_at, state_since, queue), ADD INDEX mend_records_queue_state (queue, state, updated_at, failed_at, next_attempt_at, created_at)
