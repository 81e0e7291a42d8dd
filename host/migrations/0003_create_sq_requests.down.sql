DROP TABLE sq_requests
