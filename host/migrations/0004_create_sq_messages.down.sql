DROP TABLE sq_messages
