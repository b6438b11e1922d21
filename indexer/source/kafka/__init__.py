"""Kafka, Kafka Connect and Debezium on the wire: the consumer behind the run wing's source
port, the dead-letter producer and topic, topic reads, admin clients and Connect's REST API."""
