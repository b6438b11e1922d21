"""Typed settings, built once at the edge from a TOML file plus environment overrides.

Environment variables override file values as ``INDEXER_<SECTION>__<KEY>``, for example
``INDEXER_ELASTICSEARCH__HOSTS=http://es:9200`` or ``INDEXER_KAFKA__GROUP_ID=indexer-blue``;
a table's as ``INDEXER_TABLES__<table or alias>__<KEY>``.
Every problem names the setting it comes from.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from indexer.security import Secret, redact_url

# Defaults match docker-compose.yml and dev/stack.sh, so a demo needs no settings at all.
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
# as the stream gets faster, up to 200 ms to gather ~1,000 (indexer.core.linger): a tenth of the
# ~1.5 s from commit to searchable that Elasticsearch's 1 s refresh leaves room for.
DEFAULT_LINGER_MS = 20
DEFAULT_MAX_LINGER_MS = 200
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
DEFAULT_CANARY_ALIAS = "indexer-canary"
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

IDENTIFIER = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,200}$")

DecimalMode = Literal["precise", "string", "double"]
BinaryMode = Literal["bytes", "base64"]
UnsignedMode = Literal["precise", "long"]
TimePrecisionMode = Literal["adaptive_time_microseconds", "adaptive", "connect"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
ServerKind = Literal["auto", "mariadb", "mysql"]
SnapshotPositionMode = Literal["auto", "status", "lock"]
NewColumns = Literal["map", "keep"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
_FINGERPRINT = re.compile(r"^[0-9A-Fa-f]{64}$")


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


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
    alias: str = DEFAULT_CANARY_ALIAS
    interval_s: float = DEFAULT_CANARY_INTERVAL_S
    # No canary indexed for this long while a newer one was written: unhealthy.
    max_age_s: float = DEFAULT_CANARY_MAX_AGE_S


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


@dataclass(frozen=True)
class VersionSource:
    """Where a document's external version comes from: binlog coordinates or a column."""

    kind: Literal["binlog", "column"]
    column: str | None = None

    @classmethod
    def parse(cls, text: str, where: str) -> VersionSource:
        if text == "binlog":
            return cls("binlog")
        if text.startswith("column:"):
            column = text.removeprefix("column:")
            _check_identifier(column, where)
            return cls("column", column)
        raise ConfigError(f"{where}: expected 'binlog' or 'column:<name>', got {text!r}")


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

    @functools.cached_property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class Config:
    tables: tuple[TableConfig, ...]
    kafka: KafkaSettings = KafkaSettings()
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
    tombstone_retention_s: int = DEFAULT_TOMBSTONE_RETENTION_S
    metrics_port: int = DEFAULT_METRICS_PORT
    metrics_host: str = DEFAULT_METRICS_HOST
    log_format: Literal["console", "json"] = "console"
    log_level: str = DEFAULT_LOG_LEVEL

    def secrets(self) -> Iterator[Secret]:
        """Every secret in the settings: what logs and error lines must never show."""
        for section in (self.kafka, self.elasticsearch, self.mysql, self.connect):
            for f in fields(section):
                value = getattr(section, f.name)
                if isinstance(value, Secret):
                    yield value

    def table(self, name: str) -> TableConfig:
        for table in self.tables:
            if name in (table.name, table.table, table.alias):
                return table
        known = ", ".join(t.name for t in self.tables)
        raise ConfigError(f"unknown table {name!r}; configured tables: {known}")

    def table_for_topic(self) -> dict[str, TableConfig]:
        return {t.topic: t for t in self.tables}


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> Config:
    """Reads the TOML file (if any), applies ``INDEXER_*`` overrides and validates."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    _apply_environment(raw, os.environ if environ is None else environ)
    base = path.parent if path is not None else Path.cwd()
    return build_config(raw, base)


def _apply_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    for name, value in environ.items():
        if not name.startswith("INDEXER_") or "__" not in name:
            continue
        section, _, key = name.removeprefix("INDEXER_").lower().partition("__")
        if section == "tables":
            _apply_table_environment(raw, name, key, value)
            continue
        target = raw.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{name}: [{section}] is not a section")
        target[key] = value


def _env_name(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "_", text.lower())


def _apply_table_environment(raw: dict[str, Any], name: str, key: str, value: str) -> None:
    """``INDEXER_TABLES__<table or alias>__<setting>``: a setting of one configured table
    (names compared lowercase, with anything but letters and digits as '_')."""
    table, _, setting = key.rpartition("__")
    entries = raw.get("tables")
    matches = [e for e in entries or [] if isinstance(e, dict) and table in {
        _env_name(str(e.get("name", ""))), _env_name(str(e.get("name", "")).split(".")[-1]),
        _env_name(str(e.get("alias", "")))}]
    if not table or len(matches) != 1:
        found = "no" if not matches else "more than one"
        raise ConfigError(f"{name}: {found} configured table is named {table!r} (write "
                          "INDEXER_TABLES__<table or alias>__<setting>)")
    if setting in ("rename", "column_types"):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{name}: expected a JSON object: {exc}") from exc
        matches[0][setting] = parsed
    else:
        matches[0][setting] = value


def build_config(raw: Mapping[str, Any], base_dir: Path) -> Config:
    known = {"kafka", "connector", "elasticsearch", "mysql", "batch", "deletes", "metrics",
             "logging", "tables", "connect", "health", "canary", "verify"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"unknown section [{key}]; known: {', '.join(sorted(known))}")
    connector = _section(ConnectorSettings, raw.get("connector", {}), "connector", base_dir)
    elasticsearch = _section(ElasticsearchSettings, raw.get("elasticsearch", {}),
                             "elasticsearch", base_dir)
    _check_elasticsearch(elasticsearch)
    kafka = _section(KafkaSettings, raw.get("kafka", {}), "kafka", base_dir)
    _check_kafka(kafka)
    mysql = _section(MySQLSettings, raw.get("mysql", {}), "mysql", base_dir)
    batch = _section(BatchSettings, raw.get("batch", {}), "batch", base_dir)
    connect = _section(ConnectSettings, raw.get("connect", {}), "connect", base_dir)
    _check_connect(connect)
    health = _section(HealthSettings, raw.get("health", {}), "health", base_dir)
    if health.max_source_age_s < 0:
        raise ConfigError("health.max_source_age_s must be 0 (off) or more")
    for name in ("max_events", "max_bytes", "in_flight", "target_events"):
        if getattr(batch, name) < 1:
            raise ConfigError(f"batch.{name} must be at least 1")
    if batch.linger_ms < 0 or batch.max_linger_ms < batch.linger_ms:
        raise ConfigError("batch.linger_ms must be 0 or more, and batch.max_linger_ms at least "
                          "batch.linger_ms (equal: a fixed wait)")
    tables_raw = raw.get("tables", [])
    if not isinstance(tables_raw, list) or not tables_raw:
        raise ConfigError("tables: at least one [[tables]] entry is required")
    tables = tuple(_table(t, i, connector) for i, t in enumerate(tables_raw))
    canary = _section(CanarySettings, raw.get("canary", {}), "canary", base_dir)
    canary_table = _canary_table(canary, tables, connector)
    _check_unique(tables + ((canary_table,) if canary_table else ()))
    verify = _section(VerifySettings, raw.get("verify", {}), "verify", base_dir)
    _check_verify(verify)
    deletes = raw.get("deletes", {})
    metrics = raw.get("metrics", {})
    for key in metrics:
        if key not in ("port", "host"):
            raise ConfigError(f"metrics.{key}: unknown setting; known: host, port")
    logging_raw = raw.get("logging", {})
    log_format = str(logging_raw.get("format", "console"))
    if log_format not in ("console", "json"):
        raise ConfigError(f"logging.format: expected 'console' or 'json', got {log_format!r}")
    log_level = str(logging_raw.get("level", DEFAULT_LOG_LEVEL)).upper()
    if log_level not in LOG_LEVELS:
        raise ConfigError(f"logging.level: expected one of {', '.join(LOG_LEVELS)}, "
                          f"got {log_level!r}")
    for key in logging_raw:
        if key not in ("format", "level"):
            raise ConfigError(f"logging.{key}: unknown setting; known: format, level")
    return Config(
        tables=tables,
        kafka=kafka,
        connector=connector,
        elasticsearch=elasticsearch,
        mysql=mysql,
        batch=batch,
        connect=connect,
        health=health,
        canary=canary,
        verify=verify,
        canary_table=canary_table,
        tombstone_retention_s=_int(deletes.get("tombstone_retention_s",
                                               DEFAULT_TOMBSTONE_RETENTION_S),
                                   "deletes.tombstone_retention_s"),
        metrics_port=_int(metrics.get("port", DEFAULT_METRICS_PORT), "metrics.port"),
        metrics_host=str(metrics.get("host", DEFAULT_METRICS_HOST)),
        log_format=log_format,  # type: ignore[arg-type]
        log_level=log_level,
    )


def _check_elasticsearch(es: ElasticsearchSettings) -> None:
    if not es.hosts:
        raise ConfigError("elasticsearch.hosts: at least one host is required")
    for host in es.hosts:
        parts = urlsplit(host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"elasticsearch.hosts: {redact_url(host)!r} is not an "
                              "http:// or https:// URL")
        if parts.username or parts.password:
            raise ConfigError(f"elasticsearch.hosts: {redact_url(host)!r} carries credentials; "
                              "set elasticsearch.username and password (or password_file)")
    methods = [name for name in ("username", "api_key", "bearer_token") if getattr(es, name)]
    if len(methods) > 1:
        raise ConfigError("elasticsearch: set one way to authenticate, not "
                          f"{' and '.join(methods)}")
    if es.password and not es.username:
        raise ConfigError("elasticsearch.password is set without elasticsearch.username")
    if es.username and not es.password:
        raise ConfigError("elasticsearch.username is set without elasticsearch.password "
                          "(or password_file)")
    if es.fingerprint is not None and not _FINGERPRINT.match(es.fingerprint.replace(":", "")):
        raise ConfigError("elasticsearch.fingerprint: expected the certificate's SHA-256 as 64 "
                          "hex digits (colons allowed)")
    tls_settings = [name for name in ("ca_file", "fingerprint", "cert_file")
                    if getattr(es, name) is not None]
    if tls_settings and not es.tls:
        raise ConfigError(f"elasticsearch.{tls_settings[0]} is set but no host in "
                          "elasticsearch.hosts uses https://")
    if es.key_file is not None and es.cert_file is None:
        raise ConfigError("elasticsearch.key_file is set without elasticsearch.cert_file")


def _check_connect(connect: ConnectSettings) -> None:
    if connect.url is None:
        set_ = [f.name for f in fields(connect) if f.name in ("connectors", "username", "ca_file")
                and getattr(connect, f.name)]
        if set_:
            raise ConfigError(f"connect.{set_[0]} is set without connect.url")
        return
    parts = urlsplit(connect.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"connect.url: {redact_url(connect.url)!r} is not an http:// or "
                          "https:// URL")
    if bool(connect.username) != bool(connect.password):
        raise ConfigError("connect: set both username and password (or password_file)")


def _canary_table(canary: CanarySettings, tables: tuple[TableConfig, ...],
                  connector: ConnectorSettings) -> TableConfig | None:
    if canary.interval_s <= 0:
        raise ConfigError("canary.interval_s must be more than 0")
    if canary.max_age_s < 2 * canary.interval_s:
        raise ConfigError("canary.max_age_s must be at least twice canary.interval_s (one "
                          "late beat is not a loss)")
    if not INDEX_NAME.match(canary.alias):
        raise ConfigError(f"canary.alias: {canary.alias!r} is not a valid index name "
                          "(lowercase letters, digits, '_', '-', '.')")
    if not canary.enabled:
        return None
    name = canary.table or f"{tables[0].database}.{DEFAULT_CANARY_TABLE}"
    if name.count(".") != 1:
        raise ConfigError(f"canary.table: expected '<database>.<table>', got {name!r}")
    database, table = name.split(".")
    _check_identifier(database, "canary.table")
    _check_identifier(table, "canary.table")
    # Versioned by its own count: groups that share the canary's index (blue and green)
    # then share no binlog cursors, and a fail-over changes nothing for it.
    return TableConfig(database=database, table=table,
                       topic=canary.topic or f"{connector.topic_prefix}.{name}",
                       alias=canary.alias, mapping="", version=VersionSource("column", "seq"),
                       changed_column="", canary=True)


def _check_verify(verify: VerifySettings) -> None:
    for name in ("period_s", "recent_every_s"):
        if getattr(verify, name) <= 0:
            raise ConfigError(f"verify.{name} must be more than 0")
    if not 0 < verify.max_load_share <= 1:
        raise ConfigError("verify.max_load_share must be more than 0 and at most 1")
    if verify.settle_s < 0:
        raise ConfigError("verify.settle_s must be 0 or more")


def _check_kafka(kafka: KafkaSettings) -> None:
    if kafka.sasl:
        if kafka.sasl_mechanism == "OAUTHBEARER":
            if not kafka.sasl_oauth_token_provider:
                raise ConfigError("kafka.sasl_oauth_token_provider: OAUTHBEARER needs a token "
                                  "provider ('module:factory')")
        elif not (kafka.sasl_username and kafka.sasl_password):
            raise ConfigError(f"kafka: security_protocol {kafka.security_protocol} with "
                              f"{kafka.sasl_mechanism} needs kafka.sasl_username and "
                              "kafka.sasl_password (or sasl_password_file)")
    elif kafka.sasl_username or kafka.sasl_password:
        raise ConfigError(f"kafka.sasl_username is set but kafka.security_protocol is "
                          f"{kafka.security_protocol}; use SASL_SSL or SASL_PLAINTEXT")
    tls_settings = [name for name in ("ca_file", "cert_file") if getattr(kafka, name)]
    if tls_settings and not kafka.tls:
        raise ConfigError(f"kafka.{tls_settings[0]} is set but kafka.security_protocol is "
                          f"{kafka.security_protocol}; use SSL or SASL_SSL")
    if kafka.key_file is not None and kafka.cert_file is None:
        raise ConfigError("kafka.key_file is set without kafka.cert_file")


def _table(raw: Any, index: int, connector: ConnectorSettings) -> TableConfig:
    where = f"tables[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    allowed = {"name", "topic", "alias", "mapping", "version", "include", "exclude", "rename",
               "column_types", "new_columns", "changed_column"}
    for key in raw:
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"{where}.{key}: unknown setting; known: {known}")
    name = raw.get("name")
    if not isinstance(name, str) or name.count(".") != 1:
        raise ConfigError(f"{where}.name: expected '<database>.<table>', got {name!r}")
    database, table = name.split(".")
    _check_identifier(database, f"{where}.name")
    _check_identifier(table, f"{where}.name")
    where = f"tables[{name}]"
    alias = str(raw.get("alias", table.lower()))
    if not INDEX_NAME.match(alias):
        raise ConfigError(f"{where}.alias: {alias!r} is not a valid Elasticsearch index name "
                          "(lowercase letters, digits, '_', '-', '.')")
    include = _names(raw.get("include", []), f"{where}.include")
    exclude = _names(raw.get("exclude", []), f"{where}.exclude")
    if include and exclude:
        raise ConfigError(f"{where}: set include or exclude, not both")
    rename = raw.get("rename", {})
    if not isinstance(rename, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in rename.items()
    ):
        raise ConfigError(f"{where}.rename: expected a table of column = \"new name\"")
    if "_indexer" in rename.values():
        raise ConfigError(f"{where}.rename: '_indexer' is reserved for the indexer's own fields")
    column_types = raw.get("column_types", {})
    if not isinstance(column_types, dict):
        raise ConfigError(f"{where}.column_types: expected a table of column = \"type\"")
    new_columns = raw.get("new_columns", "map")
    if new_columns not in ("map", "keep"):
        raise ConfigError(f"{where}.new_columns: expected \"map\" or \"keep\", got "
                          f"{new_columns!r}")
    changed_column = raw.get("changed_column")
    if changed_column is not None:
        changed_column = str(changed_column)
        if changed_column:
            _check_identifier(changed_column, f"{where}.changed_column")
    return TableConfig(
        database=database,
        table=table,
        topic=str(raw.get("topic", f"{connector.topic_prefix}.{name}")),
        alias=alias,
        mapping=str(raw.get("mapping", f"{alias}.json")),
        version=VersionSource.parse(str(raw.get("version", "binlog")), f"{where}.version"),
        include=include,
        exclude=exclude,
        rename=dict(rename),
        column_types={str(k): str(v) for k, v in column_types.items()},
        new_columns=new_columns,
        changed_column=changed_column,
    )


def _check_unique(tables: tuple[TableConfig, ...]) -> None:
    for attr in ("name", "topic", "alias"):
        seen: set[str] = set()
        for table in tables:
            value = getattr(table, attr)
            if value in seen:
                raise ConfigError(f"tables: {attr} {value!r} is used by two tables")
            seen.add(value)


def _names(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):  # from the environment: JSON, or comma-separated
        try:
            value = _coerce(value, tuple[str, ...], Path())
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of column names")
    for v in value:
        _check_identifier(v, where)
    return tuple(value)


def _check_identifier(value: str, where: str) -> None:
    if not IDENTIFIER.match(value):
        raise ConfigError(f"{where}: {value!r} is not a plain MySQL identifier "
                          "(letters, digits, '_' and '$', at most 64)")


def _int(value: Any, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: expected an integer, got {value!r}") from exc


def _section(cls: type[Any], raw: Any, where: str, base_dir: Path) -> Any:
    """Builds a settings dataclass from a TOML table or environment strings, converting each
    value to its field's declared type. A secret ``x`` may come from ``x_file`` instead;
    relative paths are taken from the config file's folder."""
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where}] must be a table")
    hints = typing.get_type_hints(cls)
    raw = dict(raw)
    for name in [n for n, hint in hints.items() if _base_type(hint) is Secret]:
        if f"{name}_file" in raw:
            if name in raw:
                raise ConfigError(f"{where}: set {name} or {name}_file, not both")
            raw[name] = _read_secret(base_dir, raw.pop(f"{name}_file"), f"{where}.{name}_file")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in hints:
            known = sorted({*hints, *(f"{n}_file" for n, h in hints.items()
                                      if _base_type(h) is Secret)})
            raise ConfigError(f"{where}.{key}: unknown setting; known: {', '.join(known)}")
        try:
            values[key] = _coerce(value, hints[key], base_dir)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.{key}: {exc}") from exc
    return cls(**values)


def _read_secret(base_dir: Path, value: Any, where: str) -> Secret:
    path = base_dir / str(value)
    try:
        # One trailing newline is how files are written, not part of the secret.
        return Secret(path.read_text(encoding="utf-8").removesuffix("\n"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from exc


def _base_type(hint: Any) -> Any:
    """X for ``X | None``; the hint itself otherwise."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
        return inner
    return hint


def _coerce(value: Any, hint: Any, base_dir: Path) -> Any:
    optional = _base_type(hint) is not hint
    hint = _base_type(hint)
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ValueError("a value is required")
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {value!r}")
        return value
    if hint is bool:
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"expected true or false, got {value!r}")
            return value.lower() in ("true", "1", "yes")
        return bool(value)
    if hint is int or hint is float:
        return hint(value)
    if typing.get_origin(hint) is tuple:
        if isinstance(value, str):
            if value.lstrip().startswith("["):  # JSON, as lists are written in TOML
                try:
                    value = orjson.loads(value)
                except orjson.JSONDecodeError as exc:
                    raise ValueError(f"not a JSON list: {exc}") from exc
            else:
                return tuple(v.strip() for v in value.split(",") if v.strip())
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return tuple(value)
    if hint is Path:
        path = Path(str(value))
        return path if path.is_absolute() else (base_dir / path).resolve()
    if hint is Secret:
        return value if isinstance(value, Secret) else Secret(str(value))
    return str(value)
