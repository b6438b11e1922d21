"""Index definitions from ``mappings/*.json``: validation, index names and alias plans.

Pure. Each table has
  * concrete indices named ``<alias>-v<UTC timestamp>``,
  * the read alias ``<alias>``, filtered so tombstones of deleted rows never show in searches,
  * the sync alias ``<alias>-sync``: every index the daemon must keep current (the live one,
    one being rebuilt, an old one kept for rollback).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from indexer.core.documents import META_FIELD
from indexer.errors import MappingError

# Field types a full Elasticsearch 9 or OpenSearch 3 knows (flat_object is OpenSearch's
# flattened, renamed for the server at hand). Test builds lack some: see mappings/README.md.
KNOWN_TYPES = frozenset({
    "keyword", "constant_keyword", "wildcard", "text", "match_only_text", "search_as_you_type",
    "long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float",
    "unsigned_long", "boolean", "date", "date_nanos", "ip", "binary", "geo_point", "geo_shape",
    "flattened", "flat_object", "object", "nested", "version", "dense_vector", "sparse_vector",
    "alias", "knn_vector", "integer_range", "long_range", "float_range", "double_range",
    "date_range", "ip_range",
    "completion", "token_count", "rank_feature", "rank_features", "semantic_text", "point",
    "shape", "histogram", "aggregate_metric_double", "counted_keyword", "percolator", "join",
})
ALLOWED_TOP_LEVEL = frozenset({"settings", "mappings"})

META_MAPPING: dict[str, Any] = {
    "properties": {
        "deleted": {"type": "boolean"},
        "deleted_at": {"type": "date", "format": "epoch_millis"},
        "hash": {"type": "long"},
        "key": {"type": "long"},
        "bucket": {"type": "integer"},
        # Joined documents: the lookup rows each embeds, and its children arrays cut at their cap.
        "refs": {"type": "keyword"},
        "truncated": {"type": "keyword"},
    }
}
# Searches through the read alias skip tombstones.
READ_FILTER: dict[str, Any] = {
    "bool": {"must_not": [{"term": {f"{META_FIELD}.deleted": True}}]}
}


@dataclass(frozen=True)
class IndexDefinition:
    alias: str
    settings: dict[str, Any]
    mappings: dict[str, Any]
    source: Path

    def body(self, *, bulk_load: bool = False) -> dict[str, Any]:
        """The create-index request. ``bulk_load`` turns refresh and replicas off."""
        settings = dict(self.settings)
        if bulk_load:
            settings.update(load_settings())
        return {"settings": settings, "mappings": self.mappings}

    def live_settings(self) -> dict[str, Any]:
        """What to restore after a bulk load: the file's values or Elasticsearch's defaults."""
        nested = self.settings.get("index")
        index = nested if isinstance(nested, dict) else {}

        def pick(name: str, default: Any) -> Any:
            return self.settings.get(f"index.{name}", index.get(name, default))

        return {
            "index.refresh_interval": pick("refresh_interval", "1s"),
            "index.number_of_replicas": pick("number_of_replicas", 1),
        }


def load_settings() -> dict[str, Any]:
    return {"index.refresh_interval": "-1", "index.number_of_replicas": 0}


def sync_alias(alias: str) -> str:
    return f"{alias}-sync"


def new_index_name(alias: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dt%H%M%S%f")
    return f"{alias}-v{stamp}"


_INDEX_OF_ALIAS = re.compile(r"^(?P<alias>.+)-v\d{8}t\d{12}$")


def alias_of_index(index: str) -> str | None:
    match = _INDEX_OF_ALIAS.match(index)
    return match.group("alias") if match else None


def validate_definition(raw: Any, alias: str, source: Path) -> IndexDefinition:
    if not isinstance(raw, dict):
        raise MappingError(f"{source}: expected a JSON object with settings and mappings")
    unknown = set(raw) - ALLOWED_TOP_LEVEL
    if unknown:
        raise MappingError(f"{source}: unknown top-level keys {sorted(unknown)}; aliases are "
                           "managed by indexer")
    settings = raw.get("settings", {})
    mappings = raw.get("mappings", {})
    if not isinstance(settings, dict) or not isinstance(mappings, dict):
        raise MappingError(f"{source}: settings and mappings must be objects")
    properties = mappings.get("properties", {})
    if not isinstance(properties, dict):
        raise MappingError(f"{source}: mappings.properties must be an object")
    if META_FIELD in properties:
        raise MappingError(f"{source}: mappings.properties.{META_FIELD} is reserved for indexer")
    _check_properties(properties, source, "mappings.properties")
    merged = dict(mappings)
    merged["properties"] = {**properties, META_FIELD: META_MAPPING}
    return IndexDefinition(alias=alias, settings=settings, mappings=merged, source=source)


def _check_properties(properties: Mapping[str, Any], source: Path, where: str) -> None:
    for name, spec in properties.items():
        here = f"{where}.{name}"
        if not isinstance(spec, dict):
            raise MappingError(f"{source}: {here} must be an object")
        field_type = spec.get("type", "object" if "properties" in spec else None)
        if field_type is None:
            raise MappingError(f"{source}: {here} has no type")
        if field_type not in KNOWN_TYPES:
            raise MappingError(f"{source}: {here}: unknown field type {field_type!r}")
        if isinstance(spec.get("properties"), dict):
            _check_properties(spec["properties"], source, f"{here}.properties")
        if isinstance(spec.get("fields"), dict):
            _check_properties(spec["fields"], source, f"{here}.fields")


def alias_actions_for_new(alias: str, index: str, *, live: bool) -> list[dict[str, Any]]:
    """Actions that make a fresh index current for the daemon and, if ``live``, for readers."""
    actions: list[dict[str, Any]] = [{"add": {"index": index, "alias": sync_alias(alias)}}]
    if live:
        actions.append({"add": {"index": index, "alias": alias, "filter": READ_FILTER}})
    return actions


def swap_actions(alias: str, new_index: str, old_indices: list[str]) -> list[dict[str, Any]]:
    """One atomic ``_aliases`` request: readers move from the old indices to the new one."""
    actions: list[dict[str, Any]] = [
        {"remove": {"index": old, "alias": alias}} for old in old_indices
    ]
    actions.append({"add": {"index": new_index, "alias": alias, "filter": READ_FILTER}})
    return actions
