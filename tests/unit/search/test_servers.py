from typing import Any

import pytest

from indexer.errors import UnsupportedServer
from indexer.search.servers import Server, adapt_mappings, identify

OPENSEARCH_ROOT = {"version": {"distribution": "opensearch", "number": "2.19.6"},
                   "tagline": "The OpenSearch Project: https://opensearch.org/"}


@pytest.mark.parametrize(("root", "header", "expected"), [
    (OPENSEARCH_ROOT, None, Server("opensearch", (2, 19, 6))),
    ({"version": {"distribution": "opensearch", "number": "3.3.2"}}, None,
     Server("opensearch", (3, 3, 2))),
    # A minimal build refuses GET /: only the nodes API's version and the product header.
    ({"version": {"number": "9.5.2"}}, "Elasticsearch", Server("elasticsearch", (9, 5, 2))),
    ({"version": {"number": "8.19.8", "build_flavor": "default"},
      "tagline": "You Know, for Search"}, "Elasticsearch", Server("elasticsearch", (8, 19, 8))),
    ({"version": {"number": "9.1.0-SNAPSHOT"}}, "Elasticsearch",
     Server("elasticsearch", (9, 1, 0))),
])
def test_servers_are_identified(root: dict[str, object], header: str | None,
                                expected: Server) -> None:
    assert identify(root, header) == expected


@pytest.mark.parametrize(("root", "header", "found"), [
    ({"version": {"number": "7.17.25"}, "tagline": "You Know, for Search"}, "Elasticsearch",
     "Elasticsearch 7.17.25"),
    ({"version": {"distribution": "opensearch", "number": "1.3.20"}}, None, "OpenSearch 1.3.20"),
    ({"version": {"number": "10.0.0"}}, "Elasticsearch", "Elasticsearch 10.0.0"),
    ({"name": "solr"}, None, "a server that is neither unknown version"),
])
def test_other_servers_are_refused_naming_what_was_found(root: dict[str, object],
                                                         header: str | None, found: str) -> None:
    with pytest.raises(UnsupportedServer) as refused:
        identify(root, header)
    message = str(refused.value)
    assert f"unsupported search server: {found};" in message
    assert "Elasticsearch 8 and 9, OpenSearch 2 and 3" in message


def test_flattened_and_flat_object_are_renamed_for_the_server_at_hand() -> None:
    mappings: dict[str, Any] = {"dynamic": "strict", "properties": {
        "attrs": {"type": "flattened"},
        "name": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
        "nested": {"properties": {"inner": {"type": "flat_object"}}},
    }}
    for_opensearch, renamed = adapt_mappings(Server("opensearch", (2, 19)), mappings)
    assert for_opensearch["properties"]["attrs"] == {"type": "flat_object"}
    assert for_opensearch["properties"]["nested"]["properties"]["inner"] == {
        "type": "flat_object"}
    assert renamed == ["attrs: flattened -> flat_object"]
    for_elasticsearch, renamed = adapt_mappings(Server("elasticsearch", (9,)), mappings)
    assert for_elasticsearch["properties"]["nested"]["properties"]["inner"] == {
        "type": "flattened"}
    assert renamed == ["nested.inner: flat_object -> flattened"]
    assert for_elasticsearch["properties"]["name"] == mappings["properties"]["name"]
    assert mappings["properties"]["attrs"] == {"type": "flattened"}, "the input is unchanged"
    assert for_elasticsearch["dynamic"] == "strict"
