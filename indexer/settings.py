"""indexer's settings as typed, frozen data: one dataclass per section, the tables, and the
whole configuration. Defaults are named constants with the reason for each. Built once at the
edge by :mod:`indexer.config` (file plus environment, validated) and passed in; nothing here
reads a file or the environment.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from pathlib import Path
from typing import Literal

from indexer.errors import ConfigError
from indexer.security import Secret

DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_GROUP_ID = "indexer"
DEFAULT_TOPIC_PREFIX = "mysql"  # Debezium's topic.prefix: topics are <prefix>.<db>.<table>
DEFAULT_DLQ_TOPIC = "indexer.dead-letter"
DEFAULT_ES_HOSTS = ("http://127.0.0.1:9200",)
DEFAULT_MYSQL_PORT = 3306
# ~2k small documents or 8 MB per bulk: the middle of Elastic's 5-15 MB guidance, and large
# enough that per-request overhead stays under a few percent.
DEFAULT_BATCH_EVENTS = 4000
DEFAULT_BATCH_BYTES = 8 * 1024 * 1024
# A batch waits at least 20 ms for more events (little freshness, many tiny bulks saved) and,
# as the stream gets faster, up to 80 ms to gather ~1,000 (indexer.core.linger): at most ~12
# bulks a second, and commit to searchable p99 within 1.1 s beside the 1 s refresh (200 ms
# gave 1.16-1.18 s at 500-1,000 rows/s for a few % less CPU: bench/README.md).
DEFAULT_LINGER_MS = 20
DEFAULT_MAX_LINGER_MS = 80
DEFAULT_TARGET_EVENTS = 1000
# Three bulks in flight keep Elasticsearch busy while the next batch is decoded; with two,
# the benchmark left both cores idle a third of the time (24k vs 36k events/s). Five made
# Elasticsearch slower per document: a 1M-row reindex fell from 47k to 38k rows/s.
DEFAULT_IN_FLIGHT = 3
# Elasticsearch answers slowly under merges; a minute covers that without hiding a dead node.
DEFAULT_REQUEST_TIMEOUT_S = 60.0
# Tombstones must outlive every redelivery: a week covers Kafka's default retention.
DEFAULT_TOMBSTONE_RETENTION_S = 7 * 24 * 3600
DEFAULT_METRICS_PORT = 9464  # an unassigned port in Prometheus' exporter range
# Metrics say how much data flows and where: only this machine sees them unless told otherwise.
DEFAULT_METRICS_HOST = "127.0.0.1"
# Every command logs what it does (index created, alias swapped, retries) unless told otherwise.
DEFAULT_LOG_LEVEL = "INFO"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Kafka Connect's REST API answers in milliseconds; ten seconds means it is not answering.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# Retries of transient failures back off exponentially up to this ceiling, then keep trying.
DEFAULT_MAX_BACKOFF_S = 30.0
# SIGTERM gives the batch this long to finish before it is abandoned (never committed).
DEFAULT_SHUTDOWN_GRACE_S = 20.0
# The canary: a row `indexer run` changes in MySQL and reads back through the whole pipeline.
DEFAULT_CANARY_TABLE = "indexer_canary"
# Its index is one per source and database (indexer-canary-<topic_prefix>-<database>): two
# deployments sharing a search server never share it, while groups of one deployment do.
CANARY_ALIAS_PREFIX = "indexer-canary"
# A beat every 5 s costs 17,280 one-row updates a day and lets a bound of 30 s hold six beats,
# so one slow beat is not an alarm, while a loss is reported well within a minute.
DEFAULT_CANARY_INTERVAL_S = 5.0
DEFAULT_CANARY_MAX_AGE_S = 30.0
# Continuous verification: every row of every table once an hour, its queries keeping each
# server busy at most 5% of the time (a 1M-row table's pass takes a few seconds of each).
DEFAULT_VERIFY_PERIOD_S = 3600.0
DEFAULT_VERIFY_LOAD_SHARE = 0.05
# Rows that differ are looked at again once the pipeline has delivered what was committed
# before the first look (a canary written after it has arrived), and at least this long after.
DEFAULT_VERIFY_SETTLE_S = 5.0
# The quick pass over rows changed recently (tables with a column saying when) runs this often.
DEFAULT_VERIFY_RECENT_EVERY_S = 60.0
# A document's children are capped at Elasticsearch's own limit of nested objects per document
# (index.mapping.nested_objects.limit): a longer array would be refused whole.
DEFAULT_CHILDREN_MAX = 10_000
# Joins nest at most this deep below the document's table: each level is one more query for
# every change (walking up) and for every batch of documents (reading down).
MAX_JOIN_DEPTH = 5

DecimalMode = Literal["precise", "string", "double"]
BinaryMode = Literal["bytes", "base64"]
UnsignedMode = Literal["precise", "long"]
TimePrecisionMode = Literal["adaptive_time_microseconds", "adaptive", "connect"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
ServerKind = Literal["auto", "mariadb", "mysql"]
SnapshotPositionMode = Literal["auto", "status", "lock"]
NewColumns = Literal["map", "keep"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
LogFormat = Literal["console", "json"]
JoinKind = Literal["lookup", "child"]
SourceKind = Literal["kafka", "binlog"]


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = DEFAULT_KAFKA_BOOTSTRAP
    group_id: str = DEFAULT_GROUP_ID
    dead_letter_topic: str = DEFAULT_DLQ_TOPIC
    client_id: str = "indexer"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    # Per-partition fetch size bounds memory under any backlog.
    max_partition_fetch_bytes: int = 4 * 1024 * 1024
    fetch_max_bytes: int = 16 * 1024 * 1024
    # The broker checks each batch's CRC when it is produced; checking again on every fetch
    # costs ~0.7 ns per byte (a third of consuming a 3.8 KB event). librdkafka skips it too.
    check_crcs: bool = False
    # Security, for the consumer, the dead-letter producer and the admin client alike; the
    # names are Kafka's own, so a managed service's connection instructions apply as written.
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    # "module:factory": a callable returning an aiokafka AbstractTokenProvider (OAUTHBEARER,
    # e.g. Amazon MSK IAM through aws-msk-iam-sasl-signer).
    sasl_oauth_token_provider: str | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    key_password: Secret | None = None
    verify_certs: bool = True

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


@dataclass(frozen=True)
class SourceSettings:
    """Where `indexer run` reads changes: Debezium's topics in Kafka, or the binlog itself."""

    kind: SourceKind = "kafka"
    # The deployment reading the binlog: its daemons share one saved position (and one reader).
    name: str = "indexer"
    replica_id: int = 0  # the server id it reads the binlog as; 0: derived from name


@dataclass(frozen=True)
class ConnectorSettings:
    """How the Debezium connector encodes values; used when messages carry no schema."""

    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    decimal_handling_mode: DecimalMode = "precise"
    binary_handling_mode: BinaryMode = "bytes"
    bigint_unsigned_handling_mode: UnsignedMode = "precise"
    time_precision_mode: TimePrecisionMode = "adaptive_time_microseconds"


@dataclass(frozen=True)
class ElasticsearchSettings:
    """The search server: Elasticsearch 8/9 or OpenSearch 2/3 (the section keeps its name)."""

    hosts: tuple[str, ...] = DEFAULT_ES_HOSTS
    # At most one way to authenticate: basic (username + password), api_key or bearer_token.
    username: str | None = None
    password: Secret | None = None
    api_key: Secret | None = None  # Elasticsearch's encoded key, or "id:key"
    bearer_token: Secret | None = None
    ca_file: Path | None = None
    fingerprint: str | None = None  # SHA-256 of the server's certificate, instead of a CA
    cert_file: Path | None = None  # a client certificate (PEM), with its key_file
    key_file: Path | None = None
    verify_certs: bool = True
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    mappings_dir: Path = Path("mappings")

    @property
    def tls(self) -> bool:
        return any(h.startswith("https://") for h in self.hosts)


@dataclass(frozen=True)
class MySQLSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_MYSQL_PORT
    user: str = "indexer"
    password: Secret = field(default_factory=lambda: Secret("indexer"))
    tls: bool = False  # implied by ca_file or cert_file
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    verify_certs: bool = True
    # The certificate must name the host (MySQL's VERIFY_IDENTITY); off = VERIFY_CA.
    verify_identity: bool = True
    # MariaDB or MySQL: "auto" asks the server (and, in the daemon, reads Debezium's
    # source.connector); reconcile's checksum SQL and JSON texts follow it.
    server: ServerKind = "auto"
    # How a snapshot learns its binlog position: "status" reads MariaDB's lock-free
    # Binlog_snapshot_file/position, "lock" takes a brief global read lock the way
    # mysqldump --single-transaction --source-data does (MySQL 8; needs RELOAD and
    # REPLICATION CLIENT), "auto" the first when the server has it.
    snapshot_position: SnapshotPositionMode = "auto"

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.ca_file is not None or self.cert_file is not None


@dataclass(frozen=True)
class ConnectSettings:
    """Kafka Connect's REST API, for the health of the connectors that feed the tables."""

    url: str | None = None  # e.g. http://connect:8083; unset = not checked
    connectors: tuple[str, ...] = ()  # the connectors to watch; empty = every one there
    username: str | None = None  # basic auth, when the worker's REST API asks for it
    password: Secret | None = None
    ca_file: Path | None = None
    verify_certs: bool = True
    request_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S


@dataclass(frozen=True)
class HealthSettings:
    """What `indexer check` and `indexer status` count as unhealthy beyond errors."""

    # Newest event in the tables' topics (or Debezium's heartbeat topic) older than this is a
    # stall: the connector stopped, or the database is idle and sends no heartbeats. 0 = off.
    max_source_age_s: float = 0.0


@dataclass(frozen=True)
class CanarySettings:
    """The end-to-end canary: `indexer run` changes one row per consumer group at an interval
    in a table the connector captures, and consumes its change events like any other table's.
    A connector that reads the binlog but emits nothing shows as canaries that never arrive."""

    enabled: bool = True
    # "<database>.<table>", created if absent; default: the first table's database.
    table: str | None = None
    topic: str | None = None  # default <topic_prefix>.<database>.<table>
    alias: str | None = None  # default: indexer-canary-<topic_prefix>-<database>
    interval_s: float = DEFAULT_CANARY_INTERVAL_S
    # No canary indexed for this long while a newer one was written: unhealthy.
    max_age_s: float = DEFAULT_CANARY_MAX_AGE_S
    # Where beats are written when [mysql] names a replica (default: [mysql]'s): the primary,
    # so that they travel the replication the connector reads behind. Never into a replica:
    # its own transactions there would be errant ones, refused at its next fail-over.
    mysql_host: str | None = None
    mysql_port: int | None = None


@dataclass(frozen=True)
class VerifySettings:
    """Continuous verification inside `indexer run`: a rolling pass of chunk checksums over
    every table within each period, and a quick pass over rows changed recently."""

    enabled: bool = True
    period_s: float = DEFAULT_VERIFY_PERIOD_S
    # Share of wall time its queries may keep MySQL and the search server busy.
    max_load_share: float = DEFAULT_VERIFY_LOAD_SHARE
    repair: bool = False  # rewrite what differs from MySQL, as `reconcile --repair` does
    settle_s: float = DEFAULT_VERIFY_SETTLE_S
    recent_every_s: float = DEFAULT_VERIFY_RECENT_EVERY_S


@dataclass(frozen=True)
class BatchSettings:
    max_events: int = DEFAULT_BATCH_EVENTS
    max_bytes: int = DEFAULT_BATCH_BYTES
    linger_ms: int = DEFAULT_LINGER_MS
    max_linger_ms: int = DEFAULT_MAX_LINGER_MS  # = linger_ms: a fixed wait
    target_events: int = DEFAULT_TARGET_EVENTS
    in_flight: int = DEFAULT_IN_FLIGHT
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    native: bool = True  # the native per-batch path where built (False: Python only)


@dataclass(frozen=True)
class DeletesSettings:
    tombstone_retention_s: int = DEFAULT_TOMBSTONE_RETENTION_S


@dataclass(frozen=True)
class MetricsSettings:
    host: str = DEFAULT_METRICS_HOST
    port: int = DEFAULT_METRICS_PORT  # 0 = off


@dataclass(frozen=True)
class LoggingSettings:
    format: LogFormat = "console"
    level: str = DEFAULT_LOG_LEVEL  # every command's; --log-level overrides it for one run


@dataclass(frozen=True)
class VersionSource:
    """Where a document's external version comes from: binlog coordinates or a column."""

    kind: Literal["binlog", "column"]
    column: str | None = None


@dataclass(frozen=True)
class JoinSettings:
    """A table joined into a document: a lookup (many-to-one: one object, or null) or children
    (one-to-many: an array of objects), either with joins of its own."""

    name: str  # the field of the parent's object it fills
    kind: JoinKind
    database: str
    table: str
    topic: str
    # (the parent's column, this table's column) pairs, in order: a composite key's columns
    on: tuple[tuple[str, str], ...]
    include: tuple[str, ...] | None = None  # None: every column; (): none (a link table)
    exclude: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    # Children's order: (column, descending); the child's primary key breaks ties.
    order_by: tuple[tuple[str, bool], ...] = ()
    max: int = DEFAULT_CHILDREN_MAX  # children kept per parent; more are counted as truncated
    # A field of the joined object (a path through its lookups, "tag.name") to embed instead
    # of the object: tags = ["green", "organic"] rather than [{"tag": {"name": "green"}}, ...].
    value: tuple[str, ...] | None = None
    # Joins whose columns have no index in one direction are refused (each change, or each
    # batch of documents, would scan a table) unless allowed here.
    allow_unindexed: bool = False
    joins: tuple[JoinSettings, ...] = ()

    @functools.cached_property
    def full_name(self) -> str:
        return f"{self.database}.{self.table}"


# --- row conditions: which rows a table's documents are made of ----------------------------

Literal_ = int | Decimal | str  # a condition's constant: a number (exact) or a text
Comparison = Literal["=", "!=", "<", "<=", ">", ">="]


@dataclass(frozen=True)
class Compare:
    column: str
    op: Comparison
    value: Literal_


@dataclass(frozen=True)
class Among:
    """``column [NOT] IN (values)``."""

    column: str
    values: tuple[Literal_, ...]
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    column: str
    negated: bool = False


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Negation:
    part: Condition


Condition = Compare | Among | IsNull | AllOf | AnyOf | Negation


@dataclass(frozen=True)
class RowRule:
    """A table's ``where`` (only rows it holds are indexed) and ``deleted_when`` (rows it
    holds are soft-deleted: removed from the index until restored), with SQL's three-valued
    logic: a NULL ``where`` leaves the row out, a NULL ``deleted_when`` keeps it."""

    where: Condition | None = None
    deleted_when: Condition | None = None
    where_text: str = ""  # as configured, for messages
    deleted_when_text: str = ""


@dataclass(frozen=True)
class TableConfig:
    database: str
    table: str
    topic: str
    alias: str
    mapping: str
    version: VersionSource
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    # MySQL types of columns for messages without schemas; they override what MySQL's
    # information_schema says (read at start-up and when the table's columns change).
    column_types: Mapping[str, str] = field(default_factory=dict)
    # What a new column does to the live mapping: "map" adds its generated field type there
    # (before its first value arrives), "keep" leaves the mapping to the user.
    new_columns: NewColumns = "map"
    # The DATETIME/TIMESTAMP column that says when a row last changed, for verification's
    # quick pass over recent rows; None: found in MySQL (ON UPDATE CURRENT_TIMESTAMP), "" off.
    changed_column: str | None = None
    # The canary's own table: its index mapping is built in, and it is no user's table.
    canary: bool = False
    # Tables joined into each document (lookups and children, nested): a document is then
    # the row with them, rebuilt from MySQL whenever any row of its tree changes.
    joins: tuple[JoinSettings, ...] = ()
    # Which rows are indexed (None: all of them).
    rows: RowRule | None = None
    # The search server's ingest pipeline every document write of the table goes through
    # (tombstones do not); "": none.
    pipeline: str = ""
    # The user's function ("package.module:function") from the document to the document
    # indexed (None: no document); "": none.
    transform: str = ""
    # The column whose value routes each document to its shard (a joined document: a field's
    # path, "shop.tenant_id" through a lookup); "": not routed.
    routing: str = ""

    @functools.cached_property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class Config:
    tables: tuple[TableConfig, ...]
    kafka: KafkaSettings = KafkaSettings()
    source: SourceSettings = SourceSettings()
    connector: ConnectorSettings = ConnectorSettings()
    elasticsearch: ElasticsearchSettings = ElasticsearchSettings()
    mysql: MySQLSettings = MySQLSettings()
    batch: BatchSettings = BatchSettings()
    connect: ConnectSettings = ConnectSettings()
    health: HealthSettings = HealthSettings()
    canary: CanarySettings = CanarySettings()
    verify: VerifySettings = VerifySettings()
    # The canary's table (None when the canary is off): consumed beside ``tables``.
    canary_table: TableConfig | None = None
    deletes: DeletesSettings = DeletesSettings()
    metrics: MetricsSettings = MetricsSettings()
    logging: LoggingSettings = LoggingSettings()

    def secrets(self) -> Iterator[Secret]:
        """Every secret in the settings: what logs and error lines must never show."""
        for section in (self.kafka, self.elasticsearch, self.mysql, self.connect):
            for f in fields(section):
                value = getattr(section, f.name)
                if isinstance(value, Secret):
                    yield value

    @property
    def deployment(self) -> str:
        """The name the daemons of this deployment share: the consumer group on Kafka, the
        source name on the binlog (the canary's beat row, the saved binlog position)."""
        return self.source.name if self.source.kind == "binlog" else self.kafka.group_id

    @property
    def canary_mysql(self) -> MySQLSettings:
        """The server the canary's beats are written into and read back from."""
        return replace(self.mysql, host=self.canary.mysql_host or self.mysql.host,
                       port=self.canary.mysql_port or self.mysql.port)

    @property
    def pipelines(self) -> dict[str, str]:
        """alias -> the ingest pipeline its documents go through, for the tables that set one."""
        return {t.alias: t.pipeline for t in self.tables if t.pipeline}

    def table(self, name: str) -> TableConfig:
        for table in self.tables:
            if name in (table.name, table.table, table.alias):
                return table
        known = ", ".join(t.name for t in self.tables)
        raise ConfigError(f"unknown table {name!r}; configured tables: {known}")

    def table_for_topic(self) -> dict[str, TableConfig]:
        return {t.topic: t for t in self.tables}

