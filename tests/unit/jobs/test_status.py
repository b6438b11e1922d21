from indexer.jobs.status import PartitionStatus, Status, TableStatus, render_text, table_problems


def status(**overrides: object) -> TableStatus:
    t = TableStatus("shop.items", "items", "mysql.shop.items", ["items-v2"],
                    ["items-v1", "items-v2"], documents=10, tombstones=2,
                    partitions=[PartitionStatus("mysql.shop.items", 0, 100, 100, 0,
                                               "2026-12-01T00:00:00.000+00:00")])
    for k, v in overrides.items():
        setattr(t, k, v)
    return t


def test_healthy() -> None:
    assert table_problems(status(), consumers=1) == []
    # Dead letters are reported, not unhealthy: each waits for `indexer dlq replay`.
    assert table_problems(status(dead_letters={"undecodable": 3}), consumers=1) == []


def test_lag_without_a_consumer_no_index_no_topic_and_switches() -> None:
    lagging = status(partitions=[PartitionStatus("mysql.shop.items", 0, 100, 40, 60, None, 12.5)])
    (problem,) = table_problems(lagging, consumers=0)
    assert "60 changes wait in mysql.shop.items and no daemon consumes them" in problem
    assert table_problems(lagging, consumers=1) == []  # a daemon catching up is healthy
    assert "mappings apply" in table_problems(status(live=[]), consumers=1)[0]
    assert "does not exist yet" in table_problems(status(partitions=[]), consumers=1)[0]
    assert "source switches" in table_problems(status(unacknowledged_switches=1), 1)[0]


def test_text_is_complete_lines() -> None:
    s = Status("indexer", [{"client_id": "indexer", "host": "/10.0.0.1"}], None,
               [status(dead_letters={"undecodable": 3})], problems=["x: broken"])
    lines = render_text(s)
    assert lines[0] == "group indexer: consumers indexer@/10.0.0.1"
    assert lines[1] == ("shop.items: alias items -> items-v2; sync -> items-v1, items-v2; "
                        "documents 10, tombstones 2; lag 0; dead letters undecodable 3")
    assert lines[2].startswith("  mysql.shop.items[0]: end 100, committed 100, lag 0, indexed "
                               "up to 2026-12-01T00:00:00")
    assert lines[-1] == "unhealthy: x: broken"
    assert s.as_json()["healthy"] is False


def test_a_joined_documents_truncations_and_joined_tables_lag() -> None:
    joined = status(truncated={"variants": 12}, partitions=[
        PartitionStatus("mysql.shop.items", 0, 10, 10, 0),
        PartitionStatus("mysql.shop.variants", 0, 50, 45, 5)])
    lines = render_text(Status("indexer", [], None, [joined]))
    assert "lag 5;" in lines[1]
    assert lines[3].startswith("  mysql.shop.variants[0]: end 50, committed 45, lag 5")
    assert lines[4] == "  documents with children cut at their max: variants 12"


def test_the_binlog_source_has_no_topics_or_group_to_be_unhealthy_about() -> None:
    # No partitions and no consumers: nothing to say for the binlog source (consumers None).
    assert table_problems(status(partitions=[]), consumers=None) == []
    assert "mappings apply" in table_problems(status(live=[], partitions=[]), None)[0]


def test_the_binlog_sources_text_says_where_it_reads_and_who_reads() -> None:
    binlog = {"name": "shop", "position": "mysql-bin.000003:4711", "end": "mysql-bin.000003:9000",
              "saved_at": "2026-12-03T10:00:00+00:00", "bytes_behind": 4289,
              "reader_connection": 42}
    s = Status(None, [], None, [status(partitions=[], dead_letters={"mapping": 1})],
               binlog=binlog)
    lines = render_text(s)
    assert lines[0] == ("binlog source shop: read by MySQL connection 42; saved position "
                        "mysql-bin.000003:4711 (at 2026-12-03T10:00:00+00:00), binlog end "
                        "mysql-bin.000003:9000, 4,289 bytes behind")
    assert lines[1].endswith("documents 10, tombstones 2; dead letters mapping 1")  # no lag
    assert s.as_json()["binlog"] == binlog and s.as_json()["group"] is None
    idle = render_text(Status(None, [], None, [], binlog={**binlog, "reader_connection": None,
                                                          "position": None,
                                                          "bytes_behind": None}))
    assert idle[0].startswith("binlog source shop: none reads it; saved position - (")
    assert idle[0].endswith(", - bytes behind")
    with_gtid = render_text(Status(None, [], None, [], binlog={**binlog, "gtid": "0-1-4711"}))
    assert "saved position mysql-bin.000003:4711, GTID 0-1-4711 (at " in with_gtid[0]
