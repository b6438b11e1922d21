from pathlib import Path

import pytest

from indexer.config import build_config, load_config
from indexer.errors import ConfigError

TABLE = {"name": "shop.items"}


def test_defaults_match_the_dev_stack(tmp_path: Path) -> None:
    config = build_config({"tables": [TABLE]}, tmp_path)
    t = config.tables[0]
    assert (t.topic, t.alias, t.mapping, t.version.kind) == (
        "mysql.shop.items", "items", "items.json", "binlog")
    assert config.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert config.elasticsearch.hosts == ("http://127.0.0.1:9200",)


def test_file_plus_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[kafka]\ngroup_id = "a"\n[batch]\nmax_events = 10\n'
                    '[[tables]]\nname = "shop.items"\nversion = "column:updated_at"\n'
                    'rename = { name = "title" }\n')
    config = load_config(path, {"INDEXER_KAFKA__GROUP_ID": "b", "INDEXER_BATCH__LINGER_MS": "5",
                                "INDEXER_ELASTICSEARCH__HOSTS": "http://a:1,http://b:2",
                                "INDEXER_KAFKA__CHECK_CRCS": "true"})
    assert config.kafka.group_id == "b"
    assert config.kafka.check_crcs is True
    assert (config.batch.max_events, config.batch.linger_ms) == (10, 5)
    assert config.elasticsearch.hosts == ("http://a:1", "http://b:2")
    assert config.tables[0].version.column == "updated_at"
    assert config.tables[0].rename == {"name": "title"}
    assert config.table("items") is config.tables[0]


@pytest.mark.parametrize(("raw", "match"), [
    ({}, "at least one"),
    ({"tables": [{"name": "items"}]}, r"tables\[0\].name"),
    ({"tables": [{"name": "shop.it-ems"}]}, "plain MySQL identifier"),
    ({"tables": [TABLE | {"version": "offset"}]}, r"tables\[shop.items\].version"),
    ({"tables": [TABLE | {"alias": "Bad Alias"}]}, "alias"),
    ({"tables": [TABLE | {"colour": 1}]}, r"tables\[0\].colour: unknown"),
    ({"tables": [TABLE | {"include": ["a"], "exclude": ["b"]}]}, "not both"),
    ({"tables": [TABLE | {"new_columns": "ignore"}]}, r"new_columns: expected \"map\""),
    ({"tables": [TABLE | {"where": "a > NOW()"}]}, r"tables\[shop.items\].where: expected"),
    ({"tables": [TABLE | {"deleted_when": 1}]}, r"deleted_when: expected an SQL condition"),
    ({"tables": [TABLE | {"pipeline": "a b"}]}, r"tables\[shop.items\].pipeline: expected an"),
    ({"tables": [TABLE | {"pipeline": 3}]}, r"pipeline: expected an ingest pipeline's name"),
    ({"tables": [TABLE | {"transform": 3}]}, r"transform: expected \"package.module:function"),
    ({"tables": [TABLE | {"transform": "tests.nowhere:f"}]},
     r"tables\[shop.items\].transform 'tests.nowhere:f': cannot import tests.nowhere"),
    ({"tables": [TABLE, TABLE]}, "used by two tables"),
    ({"tables": [TABLE], "kafka": {"nope": 1}}, "kafka.nope: unknown"),
    ({"tables": [TABLE], "batch": {"max_events": "many"}}, "batch.max_events"),
    ({"tables": [TABLE], "batch": {"in_flight": 0}}, "batch.in_flight"),
    ({"tables": [TABLE], "batch": {"linger_ms": 50, "max_linger_ms": 40}}, "batch.max_linger_ms"),
    ({"tables": [TABLE], "batch": {"target_events": 0}}, "batch.target_events"),
    ({"tables": [TABLE], "connector": {"decimal_handling_mode": "fast"}}, "decimal_handling"),
    ({"tables": [TABLE], "extra": {}}, r"unknown section \[extra\]"),
    ({"tables": [TABLE], "logging": {"level": "loud"}}, "logging.level: expected one of"),
    ({"tables": [TABLE], "connect": {"connectors": ["cdc"]}}, "connect.connectors is set without"),
    ({"tables": [TABLE], "connect": {"url": "connect:8083"}}, "connect.url: 'connect:8083' is not"),
    ({"tables": [TABLE], "connect": {"url": "http://c:8083", "username": "u"}}, "set both"),
    ({"tables": [TABLE], "health": {"max_source_age_s": -1}}, "health.max_source_age_s"),
    ({"tables": [TABLE], "logging": {"colour": "red"}}, "logging.colour: unknown"),
])
def test_invalid_settings_name_the_setting(raw: dict[str, object], match: str,
                                           tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        build_config(raw, tmp_path)


def test_a_tables_ingest_pipeline(tmp_path: Path) -> None:
    other = TABLE | {"name": "shop.other"}
    config = build_config({"tables": [TABLE | {"pipeline": "enrich-v2.1"}, other]}, tmp_path)
    assert config.tables[0].pipeline == "enrich-v2.1" and config.tables[1].pipeline == ""
    assert config.pipelines == {config.tables[0].alias: "enrich-v2.1"}


def test_a_tables_routing(tmp_path: Path) -> None:
    config = build_config({"tables": [TABLE | {"routing": "tenant_id"}]}, tmp_path)
    assert config.tables[0].routing == "tenant_id"
    for bad in ("shop.tenant", "a b", 3, "."):  # a path only for joined documents
        with pytest.raises(ConfigError, match=r"routing: expected a column's name"):
            build_config({"tables": [TABLE | {"routing": bad}]}, tmp_path)


def test_a_tables_transform(tmp_path: Path) -> None:
    config = build_config({"tables": [TABLE | {"transform": "tests.transforms:priced"}]},
                          tmp_path)
    assert config.tables[0].transform == "tests.transforms:priced"


def test_connect_and_health_settings(tmp_path: Path) -> None:
    secret = tmp_path / "connect.password"
    secret.write_text("s3cret-connect\n")
    config = build_config({"tables": [TABLE], "health": {"max_source_age_s": 300},
                           "connect": {"url": "https://c:8083", "connectors": ["a", "b"],
                                       "username": "u", "password_file": str(secret)}},
                          tmp_path)
    assert config.connect.connectors == ("a", "b") and config.health.max_source_age_s == 300
    assert "s3cret-connect" in [s.reveal() for s in config.secrets()]
    path = tmp_path / "c.toml"
    path.write_text('[[tables]]\nname = "shop.items"\n')
    env = load_config(path, {"INDEXER_CONNECT__URL": "http://c:8083",
                             "INDEXER_CONNECT__CONNECTORS": "a,b"})
    assert env.connect.connectors == ("a", "b")


def test_one_log_level_rule_for_every_command(tmp_path: Path) -> None:
    assert build_config({"tables": [TABLE]}, tmp_path).logging.level == "INFO"
    path = tmp_path / "c.toml"
    path.write_text('[[tables]]\nname = "shop.items"\n')
    assert load_config(path, {"INDEXER_LOGGING__LEVEL": "warning"}).logging.level == "WARNING"


def test_unknown_table_lookup(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown table 'x'"):
        build_config({"tables": [TABLE]}, tmp_path).table("x")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", {})


def test_secrets_come_from_files_and_never_print(tmp_path: Path) -> None:
    (tmp_path / "es.pw").write_text("s3cret-es\n")
    (tmp_path / "kafka.pw").write_text("s3cret-kafka")
    config = build_config({"tables": [TABLE], "elasticsearch": {
        "hosts": ["https://es:9200"], "username": "indexer", "password_file": "es.pw",
        "ca_file": "ca.crt"}, "kafka": {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "indexer", "sasl_password_file": str(tmp_path / "kafka.pw")},
        "mysql": {"password": "s3cret-mysql"}}, tmp_path)
    es = config.elasticsearch
    assert es.password is not None and es.password.reveal() == "s3cret-es"
    assert es.ca_file == tmp_path / "ca.crt", "relative to the config file"
    assert config.kafka.sasl_password is not None
    assert config.kafka.sasl_password.reveal() == "s3cret-kafka"
    assert {s.reveal() for s in config.secrets()} == {"s3cret-es", "s3cret-kafka",
                                                      "s3cret-mysql"}
    assert "s3cret" not in repr(config) and "s3cret" not in f"{es.password}"


def test_list_settings_from_the_environment_as_json_or_commas(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[tables]]\nname = "shop.items"\n')
    for value in ('["http://a:1", "http://b:2"]', "http://a:1, http://b:2"):
        config = load_config(path, {"INDEXER_ELASTICSEARCH__HOSTS": value,
                                    "INDEXER_ELASTICSEARCH__VERIFY_CERTS": "false"})
        assert config.elasticsearch.hosts == ("http://a:1", "http://b:2")
        assert config.elasticsearch.verify_certs is False


def test_table_settings_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[tables]]\nname = "shop.items"\n[[tables]]\nname = "shop.user_log"\n'
                    'alias = "user-log"\n')
    for value in ('["a", "b"]', "a, b"):
        config = load_config(path, {"INDEXER_TABLES__ITEMS__INCLUDE": value,
                                    "INDEXER_TABLES__USER_LOG__EXCLUDE": value,
                                    "INDEXER_TABLES__SHOP_ITEMS__RENAME": '{"a": "title"}'})
        items, log = config.tables
        assert items.include == ("a", "b") and log.exclude == ("a", "b")
        assert items.rename == {"a": "title"}
        assert items.new_columns == "map"  # the default
    keep = load_config(path, {"INDEXER_TABLES__ITEMS__NEW_COLUMNS": "keep",
                              "INDEXER_TABLES__ITEMS__DELETED_WHEN": "deleted_at IS NOT NULL"})
    assert keep.tables[0].new_columns == "keep"
    rows = keep.tables[0].rows
    assert rows is not None and rows.deleted_when_text == "deleted_at IS NOT NULL"
    assert rows.where is None
    with pytest.raises(ConfigError, match="INDEXER_TABLES__NOPE__INCLUDE: no configured table"):
        load_config(path, {"INDEXER_TABLES__NOPE__INCLUDE": "a"})
    with pytest.raises(ConfigError, match=r"tables\[shop.items\].include: not a JSON list"):
        load_config(path, {"INDEXER_TABLES__ITEMS__INCLUDE": "[a"})
    with pytest.raises(ConfigError, match="plain MySQL identifier"):
        load_config(path, {"INDEXER_TABLES__ITEMS__EXCLUDE": "a b"})


def test_metrics_listen_on_loopback_unless_told(tmp_path: Path) -> None:
    assert build_config({"tables": [TABLE]}, tmp_path).metrics.host == "127.0.0.1"
    opened = build_config({"tables": [TABLE], "metrics": {"host": "0.0.0.0"}}, tmp_path)
    assert opened.metrics.host == "0.0.0.0"


@pytest.mark.parametrize(("section", "values", "match"), [
    ("elasticsearch", {"hosts": ["https://u:pw@es:9200"]}, "carries credentials"),
    ("elasticsearch", {"hosts": ["es:9200"]}, "not an http:// or https:// URL"),
    ("elasticsearch", {"username": "u", "password": "p", "api_key": "k"},
     "one way to authenticate"),
    ("elasticsearch", {"password": "p"}, "password is set without elasticsearch.username"),
    ("elasticsearch", {"username": "u"}, "without elasticsearch.password"),
    ("elasticsearch", {"ca_file": "ca.crt"}, "no host in elasticsearch.hosts uses https"),
    ("elasticsearch", {"hosts": ["https://es:9200"], "fingerprint": "abc"}, "64 hex digits"),
    ("elasticsearch", {"password": "p", "password_file": "f"}, "not both"),
    ("elasticsearch", {"password_file": "missing.pw"}, "password_file: cannot read"),
    ("kafka", {"security_protocol": "SASL_SSL"}, "needs kafka.sasl_username"),
    ("kafka", {"security_protocol": "TLS"}, "security_protocol: expected one of"),
    ("kafka", {"sasl_username": "u"}, "use SASL_SSL or SASL_PLAINTEXT"),
    ("kafka", {"ca_file": "ca.crt"}, "use SSL or SASL_SSL"),
    ("kafka", {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
     "token provider"),
    ("mysql", {"verify_identity": "maybe"}, "expected true or false"),
])
def test_security_settings_are_checked_naming_the_setting(
        section: str, values: dict[str, object], match: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        build_config({"tables": [TABLE], section: values}, tmp_path)
