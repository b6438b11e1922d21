"""Which search server answers, whether indexer supports it, and the few ways servers differ.

Pure. Supported: Elasticsearch 8 and 9, OpenSearch 2 and 3 (see the README's table of the
versions tested). What differs for indexer's requests is only the mapping types: the object
field type without per-key mappings is ``flattened`` on Elasticsearch and ``flat_object`` on
OpenSearch, and each refuses the other's name. A mapping file written for either works on
both: the type is renamed when the index is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from indexer.errors import UnsupportedServer

Distribution = Literal["elasticsearch", "opensearch"]

# Major versions tested here; anything else is refused before a single write.
SUPPORTED: dict[Distribution, tuple[int, ...]] = {"elasticsearch": (8, 9), "opensearch": (2, 3)}
# Field types with another name on the other distribution: (Elasticsearch, OpenSearch).
EQUIVALENT_TYPES = (("flattened", "flat_object"),)


@dataclass(frozen=True)
class Server:
    distribution: Distribution
    version: tuple[int, ...]

    def __str__(self) -> str:
        return f"{_NAMES[self.distribution]} {'.'.join(map(str, self.version))}"

    def field_type(self, field_type: str) -> str:
        """This server's name for a field type."""
        for es, os in EQUIVALENT_TYPES:
            if field_type in (es, os):
                return es if self.distribution == "elasticsearch" else os
        return field_type


def identify(root: Mapping[str, Any], product_header: str | None) -> Server:
    """The server, from the answer to ``GET /`` (or its version alone) and the product header
    Elasticsearch sends; :class:`UnsupportedServer` when it is not one indexer supports."""
    info = root.get("version")
    info = info if isinstance(info, Mapping) else {}
    number = str(info.get("number") or "unknown version")
    distribution = str(info.get("distribution") or "")
    found: Distribution
    if distribution == "opensearch":
        found = "opensearch"
    elif product_header == "Elasticsearch" or (
            not distribution and "You Know, for Search" in str(root.get("tagline", ""))):
        found = "elasticsearch"
    else:
        what = distribution or product_header or "a server that is neither"
        raise UnsupportedServer(f"unsupported search server: {what} {number}; indexer "
                                f"supports {_supported()}")
    try:
        version = tuple(int(part) for part in number.split("-")[0].split("."))
    except ValueError:
        version = ()
    if not version or version[0] not in SUPPORTED[found]:
        raise UnsupportedServer(f"unsupported search server: {_NAMES[found]} {number}; "
                                f"indexer supports {_supported()}")
    return Server(found, version)


_NAMES: dict[Distribution, str] = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch"}


def _supported() -> str:
    return ", ".join(f"{_NAMES[d]} {' and '.join(map(str, majors))}"
                     for d, majors in SUPPORTED.items())


def adapt_mappings(server: Server, mappings: Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                          list[str]]:
    """The mappings with each field type in this server's name, and what was renamed."""
    renamed: list[str] = []

    def walk(properties: Mapping[str, Any], where: str) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for name, spec in properties.items():
            if not isinstance(spec, Mapping):
                result[name] = spec
                continue
            spec = dict(spec)
            field_type = spec.get("type")
            if isinstance(field_type, str) and server.field_type(field_type) != field_type:
                spec["type"] = server.field_type(field_type)
                renamed.append(f"{where}{name}: {field_type} -> {spec['type']}")
            for nested in ("properties", "fields"):
                if isinstance(spec.get(nested), Mapping):
                    spec[nested] = walk(spec[nested], f"{where}{name}.")
            result[name] = spec
        return result

    adapted = dict(mappings)
    if isinstance(mappings.get("properties"), Mapping):
        adapted["properties"] = walk(mappings["properties"], "")
    return adapted, renamed
