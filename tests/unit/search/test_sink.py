from typing import Any

from indexer.core.documents import Write
from indexer.core.writes import Op, Outcome
from indexer.metrics import Metrics
from indexer.search.sink import MAX_SERVER_ERROR_ATTEMPTS, ElasticsearchSink, _Round
from indexer.settings import ElasticsearchSettings


def sink() -> ElasticsearchSink:
    return ElasticsearchSink(ElasticsearchSettings(), Metrics(), max_backoff_s=1)


def round_of(ops: list[Op], indices: tuple[str, ...] = ("a-v1",)) -> _Round:
    return _Round(lines=[(op, index) for op in ops for index in indices])


def item(status: int, kind: str = "", reason: str = "") -> dict[str, Any]:
    result: dict[str, Any] = {"status": status}
    if kind:
        result["error"] = {"type": kind, "reason": reason}
    return {"index": result}


def ops(n: int) -> list[Op]:
    return [Op("a", Write(str(i), i + 1, b"{}", False)) for i in range(n)]


def test_item_results_written_stale_failed_and_retried() -> None:
    batch = ops(5)
    retry = sink()._settle(round_of(batch), {"items": [
        item(201), item(409, "version_conflict_engine_exception"),
        item(400, "document_parsing_exception", "failed to parse field [n]"),
        item(429, "es_rejected_execution_exception"), item(503, "unavailable_shards_exception"),
    ]})
    assert [op.outcome for op in batch[:3]] == [Outcome.WRITTEN, Outcome.STALE, Outcome.FAILED]
    assert batch[2].error_kind == "mapping-conflict"  # the server's kind stays in the reason
    assert "document_parsing_exception: failed to parse field [n]" in batch[2].error_reason
    assert retry == batch[3:] and all(op.outcome is None for op in retry)


def test_a_write_to_two_indices_settles_on_both() -> None:
    batch = ops(2)
    retry = sink()._settle(round_of(batch, ("a-v1", "a-v2")), {"items": [
        item(200), item(409), item(409), item(429)]})
    assert batch[0].outcome is Outcome.WRITTEN
    assert retry == [batch[1]]


def test_server_errors_are_retried_a_bounded_number_of_times() -> None:
    (op,) = ops(1)
    s = sink()
    for _ in range(MAX_SERVER_ERROR_ATTEMPTS):
        assert s._settle(round_of([op]), {"items": [item(500, "x")]}) == [op]
    assert s._settle(round_of([op]), {"items": [item(500, "x")]}) == []
    assert op.outcome is Outcome.FAILED


def test_a_clean_bulk_marks_every_op_written_without_reading_items() -> None:
    batch = ops(3)
    assert sink()._settle(round_of(batch), {"errors": False, "items": [item(201)] * 3}) == []
    assert all(op.outcome is Outcome.WRITTEN for op in batch)


def test_only_the_live_index_decides_an_ops_fate() -> None:
    s = sink()
    s._live = {"a": {"a-v2"}}  # a-v1 is kept for rollback, a-v2 is live
    batch = ops(3)
    refused = item(400, "document_parsing_exception", "failed to parse field [n]")
    round_ = round_of(batch, ("a-v1", "a-v2"))
    retry = s._settle(round_, {"items": [refused, item(201),  # kept refuses, live takes
                                         refused, refused,  # both refuse
                                         item(201), refused]})  # live refuses
    assert retry == []
    assert [op.outcome for op in batch] == [Outcome.WRITTEN, Outcome.FAILED, Outcome.FAILED]
    assert batch[1].error_reason.startswith("a-v2: ")  # the live index's answer
    # Marked as missed: what the live index took, not what both refused.
    assert round_.missed == {"a-v1": [("0", "document_parsing_exception: failed to parse "
                                            "field [n]")]}
    # Each refusal is kept (and counted), not just the first per index.
    two = ops(2)
    round_ = round_of(two, ("a-v1", "a-v2"))
    s._settle(round_, {"items": [refused, item(201), refused, item(201)]})
    assert [doc_id for doc_id, _ in round_.missed["a-v1"]] == ["0", "1"]
    both = ops(1)
    round_ = round_of(both, ("a-v1", "a-v2"))
    s._settle(round_, {"items": [refused, refused]})
    assert both[0].outcome is Outcome.FAILED and round_.missed == {}
    # Without a live index known (no read alias), every index's refusal counts.
    lone = ops(1)
    sink()._settle(round_of(lone, ("a-v1", "a-v2")), {"items": [refused, item(201)]})
    assert lone[0].outcome is Outcome.FAILED


def test_a_tombstone_left_on_an_old_routing_decides_nothing_unless_refused() -> None:
    stone = Write("1", 2, b"{}", True, "old")
    moved = Op("a", Write("1", 2, b"{}", False, "new", (stone,)))
    round_ = _Round(lines=[(moved, "a-v1"), (moved, "a-v1")], leaving={1})
    assert sink()._settle(round_, {"items": [item(409), item(201)]}) == []
    assert moved.outcome is Outcome.STALE  # the document's own answer: a newer one is there
    again = Op("a", Write("1", 2, b"{}", False, "new", (stone,)))
    round_ = _Round(lines=[(again, "a-v1"), (again, "a-v1")], leaving={1})
    assert sink()._settle(round_, {"items": [item(201), item(409)]}) == []
    assert again.outcome is Outcome.WRITTEN  # the old routing was the same shard: 409 there
