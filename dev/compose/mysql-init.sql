-- Runs once when the MySQL container initialises (after MYSQL_USER and MYSQL_DATABASE exist).
CREATE USER IF NOT EXISTS 'debezium'@'%' IDENTIFIED BY 'debezium';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'debezium'@'%';
-- REPLICATION SLAVE: indexer reads the binlog itself (the direct source).
GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'indexer'@'%';
