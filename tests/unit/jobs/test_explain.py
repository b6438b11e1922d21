from dataclasses import replace
from typing import Any

from indexer.core.compare import NOT_INDEXERS, differences
from indexer.core.documents import pack_binlog_version
from indexer.core.sources import Epoch
from indexer.jobs.explain import (
    Event,
    Explanation,
    Found,
    Letter,
    describe_version,
    judge,
    render_text,
)
from indexer.settings import TableConfig, VersionSource

TABLE = TableConfig("shop", "items", "mysql.shop.items", "items", "items.json",
                    VersionSource("binlog"))
ROW = {"id": 1, "name": "a", "price": "1.50"}


def found(source: dict[str, Any] | None = None, deleted: bool = False) -> Found:
    return Found("items-v1", True, 7, {}, deleted, source or {})


def event(committed: bool) -> Event:
    return Event("mysql.shop.items", 0, 41, committed, "2026-12-01T00:00:00.000+00:00", "u",
                 "2026-12-01T00:00:00.000+00:00", 9)


def test_versions_decode_to_binlog_coordinates_and_epochs() -> None:
    epochs = [Epoch(0, 0, 0), Epoch(1, 70, 1)]
    assert describe_version(pack_binlog_version("mysql-bin.000012", 4242, 3), TABLE.version,
                            epochs) == {"binlog_file": 12, "position": 4242, "row": 3, "epoch": 0}
    later = pack_binlog_version("other-bin.000002", 99, 0, epochs[1])
    assert describe_version(later, TABLE.version, epochs) == {
        "binlog_file": 2, "position": 99, "row": 0, "epoch": 1}
    column = VersionSource("column", "updated_at")
    assert describe_version(5, column, []) == {"column": "updated_at", "value": 5}


def test_in_sync_cases() -> None:
    assert judge(TABLE, ROW, found(dict(ROW)), [], []).in_sync
    assert judge(TABLE, None, None, [], []).in_sync
    deleted = judge(TABLE, None, found(deleted=True), [], [])
    assert deleted.in_sync and "tombstone" in deleted.summary


def test_a_row_the_rule_leaves_out_says_so() -> None:
    why = "deleted_when (deleted_at IS NOT NULL) is true"
    kept_out = judge(TABLE, None, found(deleted=True), [], [], why)
    assert kept_out.in_sync and why in kept_out.summary and "tombstone" in kept_out.summary
    assert why in judge(TABLE, None, None, [], [], why).summary
    extra = judge(TABLE, None, found(dict(ROW)), [], [], why)
    assert not extra.in_sync and extra.summary.startswith(f"extra: the row is left out ({why})")
    assert extra.fix == "indexer reconcile --repair items"


def test_fields_an_ingest_pipeline_sets_are_not_compared() -> None:
    piped = replace(TABLE, pipeline="enrich")
    source = {**ROW, "price": "9.99", "added": True}  # what the pipeline made of the row
    verdict = judge(piped, ROW, found(source), [], [], set_by_pipeline=["added", "price"])
    assert verdict.in_sync, verdict
    assert "not compared: added, price, which ingest pipeline 'enrich' sets" in verdict.summary
    stale = judge(piped, ROW, found({**source, "name": "edited"}), [], [],
                  set_by_pipeline=["added", "price"])
    assert not stale.in_sync and stale.differing_fields == ["name"]


def test_stale_names_the_fields_and_the_repair() -> None:
    verdict = judge(TABLE, ROW, found({**ROW, "price": "2.00", "old": 1}), [event(True)], [])
    assert not verdict.in_sync and verdict.differing_fields == ["old", "price"]
    assert verdict.fix == "indexer reconcile --repair items"
    # One notion of equal with reconcile's: NULL and absent are the same, so is 1 and 1.0.
    assert differences({"a": 1}, {"a": 1.0, "b": None}, flat=True) == []
    assert differences({"a": 1, "b": 2}, {"a": 1.0}, flat=True) == ["b"]


def test_a_document_indexer_did_not_write_is_stale_whatever_it_holds() -> None:
    written_behind = Found("items-v1", True, 7, {}, False, dict(ROW), by_indexer=False)
    verdict = judge(TABLE, ROW, written_behind, [], [])
    assert not verdict.in_sync and verdict.differing_fields == [NOT_INDEXERS]


def test_missing_and_extra() -> None:
    missing = judge(TABLE, ROW, None, [], [])
    assert missing.summary.startswith("missing") and missing.differing_fields == sorted(ROW)
    resurrected = judge(TABLE, ROW, found(deleted=True), [], [])
    assert "tombstone" in resurrected.summary and not resurrected.in_sync
    extra = judge(TABLE, None, found(dict(ROW)), [], [])
    assert extra.summary.startswith("extra") and extra.fix == "indexer reconcile --repair items"


def test_the_fix_prefers_waiting_then_dead_letters() -> None:
    waiting = judge(TABLE, ROW, None, [event(False), event(True)],
                    [Letter(3, "undecodable", "not JSON", "t", 40)])
    assert waiting.fix is not None and waiting.fix.startswith(
        "wait: its change at mysql.shop.items[0]@41")
    mapping = judge(TABLE, ROW, None, [event(True)],
                    [Letter(3, "document_parsing_exception", "failed to parse [price]", "t", 41)])
    assert mapping.fix == ("its change was dead-lettered (document_parsing_exception: failed to "
                           "parse [price]): fix mappings/items.json, run `indexer reindex "
                           "items`, then `indexer dlq replay --table items`")
    other = judge(TABLE, ROW, None, [], [Letter(3, "undecodable", "not JSON", "t", 41)])
    assert other.fix == ("its change was dead-lettered (undecodable: not JSON): fix the cause, "
                         "then `indexer dlq replay --table items`")


def test_the_binlog_sources_explanation_names_its_letters_by_binlog_coordinates() -> None:
    letter = Letter(9_000, "mapping", "field [price] of type float", "2026-12-03T10:00:00.000",
                    9_000, "mysql-bin.000003:4711 row 2")
    e = Explanation("shop.items", "1", ROW, [found(dict(ROW))], [], [letter], 0,
                    judge(TABLE, ROW, found(dict(ROW)), [], [letter]), source="binlog")
    lines = render_text(e)
    assert not any(line.startswith("Kafka") for line in lines)
    assert any(line.startswith("Binlog: a document's version above names the change")
               for line in lines)
    assert ("  mysql-bin.000003:4711 row 2 (2026-12-03T10:00:00.000): mapping: field [price] "
            "of type float") in lines


def test_a_routed_document_under_another_routing_or_twice_is_not_in_sync() -> None:
    routed = replace(TABLE, routing="tenant")
    here = replace(found(ROW), routing="a")
    assert judge(routed, ROW, here, [], [], routing="a").in_sync
    moved = judge(routed, ROW, here, [], [], routing="b")
    assert not moved.in_sync and moved.differing_fields == ["_routing"]
    assert "under routing 'a', the row names 'b'" in moved.summary
    assert moved.fix == "indexer reindex items"  # reconcile compares content, not placement
    twice = judge(routed, ROW, here, [], [], copies=2, routing="a")
    assert "2 documents have this id" in twice.summary
    assert twice.fix == "indexer reconcile --repair items"
    gone = replace(found(deleted=True), routing="b")  # a tombstone left behind decides nothing
    assert judge(routed, None, gone, [], [], routing=None).in_sync
