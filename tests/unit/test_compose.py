"""docker-compose.yml cannot run here; check it stays in step with indexer's defaults."""

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from indexer.config import load_config
from indexer.settings import (
    DEFAULT_ES_HOSTS,
    DEFAULT_KAFKA_BOOTSTRAP,
    DEFAULT_METRICS_PORT,
    DEFAULT_MYSQL_PORT,
    DEFAULT_TOPIC_PREFIX,
    ConnectorSettings,
)

REPO = Path(__file__).parents[2]


def compose() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def published(service: str) -> set[int]:
    return {int(p.split(":")[0]) for p in compose()["services"][service]["ports"]}


def test_published_ports_match_the_defaults() -> None:
    assert published("mysql") == {DEFAULT_MYSQL_PORT}
    assert published("kafka") == {int(DEFAULT_KAFKA_BOOTSTRAP.rsplit(":", 1)[1])}
    assert published("elasticsearch") == {urlparse(DEFAULT_ES_HOSTS[0]).port}
    assert published("connect") == {8083}
    assert published("indexer") == {DEFAULT_METRICS_PORT}


def test_connector_settings_match_what_the_decoder_expects() -> None:
    docker = json.loads((REPO / "dev/compose/connector-mysql.json").read_text())
    dev = json.loads((REPO / "dev/stack/connector.json").read_text())
    defaults = ConnectorSettings()
    for connector in (docker, dev):
        assert connector["decimal.handling.mode"] == defaults.decimal_handling_mode
        assert connector["binary.handling.mode"] == defaults.binary_handling_mode
        assert connector["bigint.unsigned.handling.mode"] == defaults.bigint_unsigned_handling_mode
        assert connector["time.precision.mode"] == defaults.time_precision_mode
        assert "DATETIME" in connector["datatype.propagate.source.type"]
        assert connector["tombstones.on.delete"] == "true"
    assert docker["topic.prefix"] == DEFAULT_TOPIC_PREFIX == defaults.topic_prefix
    assert dev["topic.prefix"] == "@TOPIC_PREFIX@"
    assert docker["connector.class"] == "io.debezium.connector.mysql.MySqlConnector"
    assert "demo" in docker["database.include.list"].split(",")
    kafka = compose()["services"]["kafka"]["environment"]
    assert f"//{docker['schema.history.internal.kafka.bootstrap.servers']}" in kafka[
        "KAFKA_ADVERTISED_LISTENERS"]


def interpolated(env: dict[str, str], shell: dict[str, str]) -> dict[str, str]:
    """Compose's ``${NAME:-default}`` as ``docker compose`` resolves it with ``shell``."""
    return {key: re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: shell.get(m[1]) or m[2], value)
            for key, value in env.items()}


def test_the_default_runs_the_direct_source_and_kafka_is_a_profile_away() -> None:
    services = compose()["services"]
    # `docker compose up`: MySQL, Elasticsearch and indexer reading the binlog.
    started = {name for name, s in services.items() if not s.get("profiles")}
    assert started == {"mysql", "elasticsearch", "indexer"}
    assert all(services[name]["profiles"] == ["kafka"]
               for name in ("kafka", "connect", "register-connector"))
    env = services["indexer"]["environment"]
    assert load_config(REPO / "examples/demo.toml", interpolated(env, {})).source.kind == "binlog"
    kafka = load_config(REPO / "examples/demo.toml",
                        interpolated(env, {"INDEXER_SOURCE": "kafka"}))
    assert kafka.source.kind == "kafka"
    # What the binlog source requires of the server, and the privilege to read it.
    command = services["mysql"]["command"]
    assert {"--binlog-format=ROW", "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL"} <= set(command)
    grants = (REPO / "dev/compose/mysql-init.sql").read_text()
    assert re.search(r"GRANT [^;]*REPLICATION SLAVE[^;]* TO 'indexer'", grants)
    # Without Kafka's services the dependency on the connector's registration is dropped.
    assert services["indexer"]["depends_on"]["register-connector"]["required"] is False


def test_indexer_service_reaches_the_other_services() -> None:
    services = compose()["services"]
    env = interpolated(services["indexer"]["environment"], {"INDEXER_SOURCE": "kafka"})
    config = load_config(REPO / "examples/demo.toml", env)
    host, port = config.kafka.bootstrap_servers.split(":")
    assert host in services and f"{host}:{port}" in services["kafka"]["environment"][
        "KAFKA_ADVERTISED_LISTENERS"]
    es = urlparse(config.elasticsearch.hosts[0])
    assert es.hostname in services and es.port == 9200
    assert config.mysql.host in services
    assert config.tables[0].topic == f"{DEFAULT_TOPIC_PREFIX}.demo.products"
    assert (config.elasticsearch.mappings_dir / config.tables[0].mapping).exists()
    assert services["connect"]["image"].startswith("quay.io/debezium/connect:3")
    assert services["mysql"]["image"] == "mysql:8.4"
    assert "--binlog-format=ROW" in services["mysql"]["command"]
