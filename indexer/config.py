"""Typed settings, built once at the edge from a TOML file plus environment overrides.

Environment variables override file values as ``INDEXER_<SECTION>__<KEY>``, for example
``INDEXER_ELASTICSEARCH__HOSTS=http://es:9200`` or ``INDEXER_KAFKA__GROUP_ID=indexer-blue``.
Every problem names the setting it comes from.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
# Waiting up to 20 ms for a fuller batch costs little freshness and saves many tiny bulks.
DEFAULT_LINGER_MS = 20
# Three bulks in flight keep Elasticsearch busy while the next batch is decoded; with two,
# the benchmark left both cores idle a third of the time (24k vs 36k events/s). Five made
# Elasticsearch slower per document: a 1M-row reindex fell from 47k to 38k rows/s.
DEFAULT_IN_FLIGHT = 3
# Elasticsearch answers slowly under merges; a minute covers that without hiding a dead node.
DEFAULT_REQUEST_TIMEOUT_S = 60.0
# Tombstones must outlive every redelivery: a week covers Kafka's default retention.
DEFAULT_TOMBSTONE_RETENTION_S = 7 * 24 * 3600
DEFAULT_METRICS_PORT = 9464  # an unassigned port in Prometheus' exporter range
# Retries of transient failures back off exponentially up to this ceiling, then keep trying.
DEFAULT_MAX_BACKOFF_S = 30.0
# SIGTERM gives the batch this long to finish before it is abandoned (never committed).
DEFAULT_SHUTDOWN_GRACE_S = 20.0

IDENTIFIER = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,200}$")

DecimalMode = Literal["precise", "string", "double"]
BinaryMode = Literal["bytes", "base64"]
UnsignedMode = Literal["precise", "long"]
TimePrecisionMode = Literal["adaptive_time_microseconds", "adaptive", "connect"]


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
    hosts: tuple[str, ...] = DEFAULT_ES_HOSTS
    username: str | None = None
    password: str | None = None
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    mappings_dir: Path = Path("mappings")


@dataclass(frozen=True)
class MySQLSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_MYSQL_PORT
    user: str = "indexer"
    password: str = "indexer"


@dataclass(frozen=True)
class BatchSettings:
    max_events: int = DEFAULT_BATCH_EVENTS
    max_bytes: int = DEFAULT_BATCH_BYTES
    linger_ms: int = DEFAULT_LINGER_MS
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
    # Debezium type names for columns, needed only for messages without schemas.
    column_types: Mapping[str, str] = field(default_factory=dict)

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
    tombstone_retention_s: int = DEFAULT_TOMBSTONE_RETENTION_S
    metrics_port: int = DEFAULT_METRICS_PORT
    log_format: Literal["console", "json"] = "console"

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
        target = raw.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{name}: [{section}] is not a section")
        target[key] = value


def build_config(raw: Mapping[str, Any], base_dir: Path) -> Config:
    known = {"kafka", "connector", "elasticsearch", "mysql", "batch", "deletes", "metrics",
             "logging", "tables"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"unknown section [{key}]; known: {', '.join(sorted(known))}")
    connector = _section(ConnectorSettings, raw.get("connector", {}), "connector")
    es_raw = dict(raw.get("elasticsearch", {}))
    if isinstance(es_raw.get("hosts"), str):
        es_raw["hosts"] = [h.strip() for h in es_raw["hosts"].split(",") if h.strip()]
    if "mappings_dir" in es_raw:
        es_raw["mappings_dir"] = (base_dir / str(es_raw["mappings_dir"])).resolve()
    elasticsearch = _section(ElasticsearchSettings, es_raw, "elasticsearch")
    batch = _section(BatchSettings, raw.get("batch", {}), "batch")
    for name in ("max_events", "max_bytes", "in_flight"):
        if getattr(batch, name) < 1:
            raise ConfigError(f"batch.{name} must be at least 1")
    tables_raw = raw.get("tables", [])
    if not isinstance(tables_raw, list) or not tables_raw:
        raise ConfigError("tables: at least one [[tables]] entry is required")
    tables = tuple(_table(t, i, connector) for i, t in enumerate(tables_raw))
    _check_unique(tables)
    deletes = raw.get("deletes", {})
    metrics = raw.get("metrics", {})
    logging_raw = raw.get("logging", {})
    log_format = str(logging_raw.get("format", "console"))
    if log_format not in ("console", "json"):
        raise ConfigError(f"logging.format: expected 'console' or 'json', got {log_format!r}")
    return Config(
        tables=tables,
        kafka=_section(KafkaSettings, raw.get("kafka", {}), "kafka"),
        connector=connector,
        elasticsearch=elasticsearch,
        mysql=_section(MySQLSettings, raw.get("mysql", {}), "mysql"),
        batch=batch,
        tombstone_retention_s=_int(deletes.get("tombstone_retention_s",
                                               DEFAULT_TOMBSTONE_RETENTION_S),
                                   "deletes.tombstone_retention_s"),
        metrics_port=_int(metrics.get("port", DEFAULT_METRICS_PORT), "metrics.port"),
        log_format=log_format,  # type: ignore[arg-type]
    )


def _table(raw: Any, index: int, connector: ConnectorSettings) -> TableConfig:
    where = f"tables[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    allowed = {"name", "topic", "alias", "mapping", "version", "include", "exclude", "rename",
               "column_types"}
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


def _section(cls: type[Any], raw: Any, where: str) -> Any:
    """Builds a settings dataclass, converting env strings to the declared field types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where}] must be a table")
    fields = cls.__dataclass_fields__
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown setting; known: {', '.join(sorted(fields))}")
        default = fields[key].default
        try:
            values[key] = _coerce(value, default)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.{key}: {exc}") from exc
    instance = cls(**values)
    _check_literals(instance, where)
    return instance


def _coerce(value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"expected true or false, got {value!r}")
            return value.lower() in ("true", "1", "yes")
        return bool(value)
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    if isinstance(default, tuple):
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return tuple(value)
    if isinstance(default, Path):
        return Path(value)
    if default is None or isinstance(default, str):
        return None if value is None else str(value)
    return value


_LITERALS: dict[str, tuple[str, ...]] = {
    "auto_offset_reset": ("earliest", "latest"),
    "decimal_handling_mode": ("precise", "string", "double"),
    "binary_handling_mode": ("bytes", "base64", ),
    "bigint_unsigned_handling_mode": ("precise", "long"),
    "time_precision_mode": ("adaptive_time_microseconds", "adaptive", "connect"),
}


def _check_literals(instance: Any, where: str) -> None:
    for name, allowed in _LITERALS.items():
        if hasattr(instance, name) and getattr(instance, name) not in allowed:
            raise ConfigError(f"{where}.{name}: expected one of {', '.join(allowed)}, "
                              f"got {getattr(instance, name)!r}")
