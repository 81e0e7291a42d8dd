DROP TABLE sq_batches
