import orjson

from indexer.core.bulk import action_line
from indexer.core.documents import Write


def test_action_line_carries_id_and_external_version() -> None:
    line = action_line("a-v1", Write('x"1', 5, b"{}", False))
    assert orjson.loads(line) == {"index": {"_index": "a-v1", "_id": 'x"1', "version": 5,
                                            "version_type": "external"}}
    assert b"\n" not in line  # one NDJSON line; the request adds the newlines


def test_action_line_escapes_the_index_and_names_the_version_type() -> None:
    line = action_line('a"b', Write("1", 2, b"{}", False), "external_gte")
    assert orjson.loads(line)["index"] == {"_index": 'a"b', "_id": "1", "version": 2,
                                           "version_type": "external_gte"}


def test_documents_name_the_tables_ingest_pipeline_and_tombstones_do_not() -> None:
    document = orjson.loads(action_line("a-v1", Write("1", 2, b"{}", False), pipeline="p-1"))
    assert document["index"]["pipeline"] == "p-1"
    tombstone = orjson.loads(action_line("a-v1", Write("1", 3, b"{}", True), pipeline="p-1"))
    assert "pipeline" not in tombstone["index"]  # a pipeline is for rows, not their stand-ins


def test_every_combination_of_routing_and_pipeline_gives_the_action_orjson_would() -> None:
    for routing in (None, 'r"7'):
        for pipeline in ("", "p-1"):
            for deleted in (False, True):
                write = Write("é1", 9, b"{}", deleted, routing)
                action: dict[str, object] = {"_index": "a-v1", "_id": "é1", "version": 9,
                                             "version_type": "external"}
                if routing is not None:
                    action["routing"] = routing
                if pipeline and not deleted:
                    action["pipeline"] = pipeline
                assert action_line("a-v1", write, pipeline=pipeline) == orjson.dumps(
                    {"index": action})
