"""Configuration: settings built once at the edge from a TOML file plus environment overrides,
every section validated the same way (its values converted to their declared types, then the
section's own check), every problem naming the setting it comes from.

Environment variables override file values as ``INDEXER_<SECTION>__<KEY>``, for example
``INDEXER_ELASTICSEARCH__HOSTS=http://es:9200`` or ``INDEXER_KAFKA__GROUP_ID=indexer-blue``;
a table's as ``INDEXER_TABLES__<table or alias>__<KEY>``.
"""

from __future__ import annotations

import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from indexer import transforms
from indexer.condition_config import parse_rule
from indexer.errors import ConfigError
from indexer.join_config import parse_joins
from indexer.security import Secret, redact_url
from indexer.settings import (
    CANARY_ALIAS_PREFIX,
    DEFAULT_CANARY_TABLE,
    LOG_LEVELS,
    BatchSettings,
    CanarySettings,
    Config,
    ConnectorSettings,
    ConnectSettings,
    DeletesSettings,
    ElasticsearchSettings,
    HealthSettings,
    KafkaSettings,
    LoggingSettings,
    MetricsSettings,
    MySQLSettings,
    SourceSettings,
    TableConfig,
    VerifySettings,
    VersionSource,
)

IDENTIFIER = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,200}$")
INGEST_PIPELINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}$")  # safe in a URL and JSON
_ROUTING = re.compile(r"^[^.\s`]+(\.[^.\s`]+)*$")  # names joined by dots
_FINGERPRINT = re.compile(r"^[0-9A-Fa-f]{64}$")

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
    if setting in ("rename", "column_types", "lookups", "children"):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{name}: expected a JSON object: {exc}") from exc
        matches[0][setting] = parsed
    else:
        matches[0][setting] = value


def build_config(raw: Mapping[str, Any], base_dir: Path) -> Config:
    for key in raw:
        if key not in SECTIONS and key != "tables":
            known = sorted([*SECTIONS, "tables"])
            raise ConfigError(f"unknown section [{key}]; known: {', '.join(known)}")
    sections = {name: _section(cls, raw.get(name, {}), name, base_dir)
                for name, cls in SECTIONS.items()}
    tables_raw = raw.get("tables", [])
    if not isinstance(tables_raw, list) or not tables_raw:
        raise ConfigError("tables: at least one [[tables]] entry is required")
    tables = tuple(_table(t, i, sections["connector"]) for i, t in enumerate(tables_raw))
    canary_table = _canary_table(sections["canary"], tables, sections["connector"])
    _check_unique(tables + ((canary_table,) if canary_table else ()))
    return Config(tables=tables, canary_table=canary_table, **sections)


def _check_batch(batch: BatchSettings) -> BatchSettings:
    for name in ("max_events", "max_bytes", "in_flight", "target_events"):
        if getattr(batch, name) < 1:
            raise ConfigError(f"batch.{name} must be at least 1")
    if batch.linger_ms < 0 or batch.max_linger_ms < batch.linger_ms:
        raise ConfigError("batch.linger_ms must be 0 or more, and batch.max_linger_ms at least "
                          "batch.linger_ms (equal: a fixed wait)")
    return batch


def _check_health(health: HealthSettings) -> HealthSettings:
    if health.max_source_age_s < 0:
        raise ConfigError("health.max_source_age_s must be 0 (off) or more")
    return health


def _check_logging(logging: LoggingSettings) -> LoggingSettings:
    level = logging.level.upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"logging.level: expected one of {', '.join(LOG_LEVELS)}, "
                          f"got {level!r}")
    return replace(logging, level=level)


def _check_elasticsearch(es: ElasticsearchSettings) -> ElasticsearchSettings:
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
    return es


def _check_connect(connect: ConnectSettings) -> ConnectSettings:
    if connect.url is None:
        set_ = [f.name for f in fields(connect) if f.name in ("connectors", "username", "ca_file")
                and getattr(connect, f.name)]
        if set_:
            raise ConfigError(f"connect.{set_[0]} is set without connect.url")
        return connect
    parts = urlsplit(connect.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"connect.url: {redact_url(connect.url)!r} is not an http:// or "
                          "https:// URL")
    if bool(connect.username) != bool(connect.password):
        raise ConfigError("connect: set both username and password (or password_file)")
    return connect


def _check_canary(canary: CanarySettings) -> CanarySettings:
    if canary.interval_s <= 0:
        raise ConfigError("canary.interval_s must be more than 0")
    if canary.max_age_s < 2 * canary.interval_s:
        raise ConfigError("canary.max_age_s must be at least twice canary.interval_s (one "
                          "late beat is not a loss)")
    if canary.alias is not None and not INDEX_NAME.match(canary.alias):
        raise ConfigError(f"canary.alias: {canary.alias!r} is not a valid index name "
                          "(lowercase letters, digits, '_', '-', '.')")
    return canary


def _canary_table(canary: CanarySettings, tables: tuple[TableConfig, ...],
                  connector: ConnectorSettings) -> TableConfig | None:
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
                       alias=canary.alias or canary_alias(connector.topic_prefix, database),
                       mapping="", version=VersionSource("column", "seq"),
                       changed_column="", canary=True)


def canary_alias(source: str, database: str) -> str:
    """The canary's default alias, one per source and database, as an index name."""
    name = f"{CANARY_ALIAS_PREFIX}-{source}-{database}".lower()
    return re.sub(r"[^a-z0-9_.\-]+", "_", name)


def _check_verify(verify: VerifySettings) -> VerifySettings:
    for name in ("period_s", "recent_every_s"):
        if getattr(verify, name) <= 0:
            raise ConfigError(f"verify.{name} must be more than 0")
    if not 0 < verify.max_load_share <= 1:
        raise ConfigError("verify.max_load_share must be more than 0 and at most 1")
    if verify.settle_s < 0:
        raise ConfigError("verify.settle_s must be 0 or more")
    return verify


def _check_source(source: SourceSettings) -> SourceSettings:
    if not source.name:
        raise ConfigError("source.name must not be empty")
    if not 0 <= source.replica_id < 1 << 32:
        raise ConfigError("source.replica_id must be a server id: 1 to 4294967295 (0: derived "
                          "from source.name)")
    return source


def _check_kafka(kafka: KafkaSettings) -> KafkaSettings:
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
    return kafka


def _table(raw: Any, index: int, connector: ConnectorSettings) -> TableConfig:
    where = f"tables[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    allowed = {"name", "topic", "alias", "mapping", "version", "include", "exclude", "rename",
               "column_types", "new_columns", "changed_column", "lookups", "children", "where",
               "deleted_when", "pipeline", "transform", "routing"}
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
    pipeline = raw.get("pipeline", "")
    if not isinstance(pipeline, str) or (pipeline and not INGEST_PIPELINE.match(pipeline)):
        raise ConfigError(f"{where}.pipeline: expected an ingest pipeline's name, got "
                          f"{pipeline!r}")
    version = _version_source(str(raw.get("version", "binlog")), f"{where}.version")
    joins = parse_joins(raw, where, database, table, connector, _names, _check_identifier)
    transform = _transform(raw.get("transform", ""), where)
    routing = raw.get("routing", "")
    if not isinstance(routing, str) or (routing and not _ROUTING.match(routing)) or (
            "." in routing and not joins):
        raise ConfigError(f"{where}.routing: expected a column's name (a joined document: a "
                          f"field's path, 'shop.tenant_id'), got {routing!r}")
    if joins and version.kind != "binlog":
        raise ConfigError(f"{where}.version: joined documents need binlog versions: a column's "
                          "version does not order changes across the tables of a document")
    return TableConfig(
        database=database,
        table=table,
        topic=str(raw.get("topic", f"{connector.topic_prefix}.{name}")),
        alias=alias,
        mapping=str(raw.get("mapping", f"{alias}.json")),
        version=version,
        include=include,
        exclude=exclude,
        rename=dict(rename),
        column_types={str(k): str(v) for k, v in column_types.items()},
        new_columns=new_columns,
        changed_column=changed_column,
        joins=joins,
        rows=parse_rule(raw, where),
        pipeline=pipeline,
        transform=transform,
        routing=routing,
    )


def _transform(spec: Any, where: str) -> str:
    """The function's name, imported now so that a typo stops the start, not the first row."""
    if spec == "":
        return ""
    if not isinstance(spec, str):
        raise ConfigError(f"{where}.transform: expected \"package.module:function\", got "
                          f"{spec!r}")
    try:
        transforms.load(spec)
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc}") from exc
    return spec


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


def _version_source(text: str, where: str) -> VersionSource:
    if text == "binlog":
        return VersionSource("binlog")
    if text.startswith("column:"):
        column = text.removeprefix("column:")
        _check_identifier(column, where)
        return VersionSource("column", column)
    raise ConfigError(f"{where}: expected 'binlog' or 'column:<name>', got {text!r}")


def _check_identifier(value: str, where: str) -> None:
    if not IDENTIFIER.match(value):
        raise ConfigError(f"{where}: {value!r} is not a plain MySQL identifier "
                          "(letters, digits, '_' and '$', at most 64)")


def _same(section: Any) -> Any:
    return section


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
    return CHECKS.get(cls, _same)(cls(**values))


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


# Every section, with its check (each returns the section, normalised where it must be).
SECTIONS: dict[str, type[Any]] = {
    "kafka": KafkaSettings, "source": SourceSettings, "connector": ConnectorSettings,
    "elasticsearch": ElasticsearchSettings, "mysql": MySQLSettings, "batch": BatchSettings,
    "connect": ConnectSettings, "health": HealthSettings, "canary": CanarySettings,
    "verify": VerifySettings, "deletes": DeletesSettings, "metrics": MetricsSettings,
    "logging": LoggingSettings,
}
CHECKS: dict[type[Any], Callable[[Any], Any]] = {
    ElasticsearchSettings: _check_elasticsearch, KafkaSettings: _check_kafka,
    SourceSettings: _check_source,
    ConnectSettings: _check_connect, BatchSettings: _check_batch, HealthSettings: _check_health,
    VerifySettings: _check_verify, LoggingSettings: _check_logging,
    CanarySettings: _check_canary,
}
