-- Runs once when the MySQL container initialises (after MYSQL_USER and MYSQL_DATABASE exist).
CREATE USER IF NOT EXISTS 'debezium'@'%' IDENTIFIED BY 'debezium';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'debezium'@'%';
GRANT SELECT, RELOAD, REPLICATION CLIENT ON *.* TO 'indexer'@'%';
