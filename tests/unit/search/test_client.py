import base64
from typing import Any

import pytest

from indexer.search.client import SearchError, auth_header
from indexer.security import Secret
from indexer.settings import ElasticsearchSettings


def header(**settings: Any) -> str:
    return auth_header(ElasticsearchSettings(**settings)).get("authorization", "")


def test_each_way_to_authenticate_makes_its_header() -> None:
    assert header() == ""
    basic = header(username="elastic", password=Secret("pa:ss"))
    assert basic == "Basic " + base64.b64encode(b"elastic:pa:ss").decode()
    encoded = base64.b64encode(b"VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw").decode()
    assert header(api_key=Secret(encoded)) == "ApiKey " + encoded
    # The id:key pair, as the create-API-key answer lists it, is encoded for the user.
    assert header(api_key=Secret("VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw")) == (
        "ApiKey " + encoded)
    assert header(bearer_token=Secret("AAEAAWVs")) == "Bearer AAEAAWVs"


@pytest.mark.parametrize(("body", "kind", "reason"), [
    ({"error": {"type": "security_exception", "reason": "missing authentication"},
      "status": 401}, "security_exception", "missing authentication"),
    ({"error": "Incorrect HTTP method", "status": 405}, "405", "Incorrect HTTP method"),
    (None, "502", ""),
])
def test_errors_carry_the_servers_kind_and_reason(body: object, kind: str, reason: str) -> None:
    status = int(kind) if kind.isdigit() else 401
    error = SearchError(status, "POST", "/_bulk?filter_path=errors", body)
    assert (error.status, error.kind, error.reason) == (status, kind, reason)
    assert str(error).startswith(f"POST /_bulk answered {status} {kind}")
