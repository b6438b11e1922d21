"""MySQL's and MariaDB's binlog read directly, as a replica reads it: the replication stream
and the source behind the run wing's source port."""
