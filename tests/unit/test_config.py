from pathlib import Path

import pytest

from indexer.config import ConfigError, build_config, load_config

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
    ({"tables": [TABLE, TABLE]}, "used by two tables"),
    ({"tables": [TABLE], "kafka": {"nope": 1}}, "kafka.nope: unknown"),
    ({"tables": [TABLE], "batch": {"max_events": "many"}}, "batch.max_events"),
    ({"tables": [TABLE], "batch": {"in_flight": 0}}, "batch.in_flight"),
    ({"tables": [TABLE], "connector": {"decimal_handling_mode": "fast"}}, "decimal_handling"),
    ({"tables": [TABLE], "extra": {}}, r"unknown section \[extra\]"),
])
def test_invalid_settings_name_the_setting(raw: dict[str, object], match: str,
                                           tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        build_config(raw, tmp_path)


def test_unknown_table_lookup(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown table 'x'"):
        build_config({"tables": [TABLE]}, tmp_path).table("x")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", {})
