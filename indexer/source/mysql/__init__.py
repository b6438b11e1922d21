"""The MySQL/MariaDB adapter, by job: connection, schema, rows, checksum SQL."""
