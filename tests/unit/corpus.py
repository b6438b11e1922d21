"""Everything the per-event path produces for a fixed corpus, as JSON: run in the test
process (the compiled modules, when built) and as a script over a copy of the package's
``.py`` files alone (pure Python), the two outputs must be equal byte for byte.

    python tests/unit/corpus.py   # prints the JSON; PYTHONPATH picks the package
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import orjson

from indexer.core import compare, trees, values
from indexer.core.bulk import action_line
from indexer.core.checksums import content_hash, double_text, hash_text
from indexer.core.documents import DocumentBuilder, document_id, pack_binlog_version
from indexer.core.events import EnvelopeDecoder
from indexer.core.layout import Column, TableLayout
from indexer.core.sources import Epoch
from indexer.errors import DecodeError
from indexer.settings import ConnectorSettings, JoinSettings, TableConfig, VersionSource

FIXTURES = Path(__file__).parent / "fixtures"
POISON: list[tuple[bytes | None, bytes | None]] = [
    (b'{"id":1}', b"\x00\x01garbage"),
    (b'{"id":1}', b'{"op":"t","source":{}}'),
    (b'{"id":1}', b'{"hello":"world"}'),
    (b'{"id":1}', b'{"op":"c","after":{"id":1},"source":{"pos":"4"}}'),
    (b'{"id":1}', b'{"op":"c","after":{"id":1,"d":"yesterday"},"source":{"file":"b.000001"}}'),
    (None, b'{"op":"c","after":{"id":1},"source":{}}'),
]
# Each hinted type's converter fed values of every JSON shape: errors must read the same.
HINTS = ["date", "datetime(0)", "datetime(3)", "datetime(6)", "timestamp(6)", "time(0)",
         "time(6)", "decimal(10,2)", "bigint unsigned", "bit(12)", "set", "json", "float",
         "tinyint(1)", "varchar", "point", "geometrycollection"]
SHAPES: list[Any] = ["x", "", "2024-01-02T03:04:05Z", "AJY=", 1.5, -1, 0, 2**63 - 1, -(2**63), True,
                     [1], {"a": 1}, {"value": "AJY=", "scale": 2}, '{"a":1}', "a,b",
                     {"x": 1.5, "y": -2.25, "wkb": "AQEAAAAAAAAAAAD4PwAAAAAAAALA", "srid": 4326},
                     {"wkb": "AQcAAAAAAAAA"}, {"wkb": "AQEAAAAAAAAAAAD4"}]
DOUBLES = [0.0, -0.0, 1e-5, 1e-4, 0.1, 1 / 3, 2.000001, 1e15, 1e16, 123456789012345680.0,
           1e20, 5e-324, 1.7976931348623157e308, -2.5e-7, math.pi * 1e-14, 9007199254740993.0]


def messages(name: str) -> list[tuple[bytes | None, bytes | None]]:
    """Messages recorded from Debezium 3.5.0's MariaDB connector: key TAB value per line."""
    pairs = []
    for line in (FIXTURES / name).read_bytes().splitlines():
        key, value = line.split(b"\t", 1)
        pairs.append((None if key == b"null" else key, None if value == b"null" else value))
    return pairs


def without_schemas(pairs: list[tuple[bytes | None, bytes | None]]
                    ) -> list[tuple[bytes | None, bytes | None]]:
    def bare(raw: bytes | None) -> bytes | None:
        return None if raw is None else orjson.dumps(orjson.loads(raw)["payload"])
    return [(bare(k), bare(v)) for k, v in pairs]


def builders() -> list[DocumentBuilder]:
    def table(version: VersionSource) -> TableConfig:
        return TableConfig(database="shop", table="items", topic="t", alias="items",
                           mapping="items.json", version=version)
    return [DocumentBuilder(table(VersionSource("binlog"))),
            DocumentBuilder(table(VersionSource("column", "id")))]


def decoded(decoder: EnvelopeDecoder, pairs: list[tuple[bytes | None, bytes | None]],
            epoch: Epoch) -> list[Any]:
    out: list[Any] = []
    for key, value in pairs:
        try:
            change = decoder.decode(key, value)
        except DecodeError as exc:
            out.append(["error", exc.kind, exc.reason])
            continue
        except Exception as exc:
            out.append(["crash", type(exc).__name__, str(exc)])
            continue
        if change is None:
            out.append(["tombstone"])
            continue
        out.append(["change", repr((change.op, change.key, change.before, change.after))])
        for builder in builders():
            try:
                write = builder.write_for_change(change, epoch)
            except DecodeError as exc:
                out.append(["error", exc.kind, exc.reason])
                continue
            except Exception as exc:  # what the daemon dead-letters as an internal error
                out.append(["crash", type(exc).__name__, str(exc)])
                continue
            out.append(["write", write.id, write.version, write.source.decode(), write.deleted,
                        action_line("items-v1", write).decode()])
    return out


def every_shape() -> list[Any]:
    out = []
    for hint in HINTS:
        decoder = EnvelopeDecoder(ConnectorSettings(), {"c": hint})
        for shape in SHAPES:
            value = orjson.dumps({"op": "c", "after": {"id": 1, "c": shape},
                                  "source": {"file": "b.000001", "pos": 4}})
            out.append(decoded(decoder, [(b'{"id":1}', value)], Epoch(0, 0, 0)))
    return out


def joined() -> list[Any]:
    """Joined documents: assembled (lookups, children cut at their cap, dangling keys, value
    joins, a composite key), written, touched, compared and read back from ids."""
    def column(name: str, data_type: str = "int", key: int = 0) -> Column:
        return Column(name, data_type, data_type, 0, key)

    layouts = {
        "s.p": TableLayout("s", "p", (column("id", key=1), column("name", "varchar"),
                                      column("c_id"), column("f", "double"))),
        "s.c": TableLayout("s", "c", (column("id", key=1), column("name", "varchar"))),
        "s.v": TableLayout("s", "v", (column("p_id", key=1), column("n", key=2),
                                      column("j", "json"))),
    }
    table = TableConfig("s", "p", "t", "p", "p.json", VersionSource("binlog"), joins=(
        JoinSettings("cat", "lookup", "s", "c", "t.c", (("c_id", "id"),), value=("name",)),
        JoinSettings("vs", "child", "s", "v", "t.v", (("id", "p_id"),), max=2)))
    tree = trees.build(table, layouts)
    cats, variants = trees.Matches(), trees.Matches()
    cats.add((1,), {"id": 1, "name": "é|x"})
    for n in range(3):
        variants.add((7,), {"p_id": 7, "n": n, "j": {"a": [n, 1.5]}}, 3)
    roots: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        ({"id": 7}, {"id": 7, "name": "a", "c_id": 1, "f": d}) for d in DOUBLES[:6]]
    roots += [({"id": 8}, {"id": 8, "name": None, "c_id": 9, "f": None}), ({"id": 9}, None)]
    documents = trees.assemble(tree, roots, {1: cats, 2: variants}, trace=True)
    return [
        [(a.document, a.refs, a.truncated, a.rows) for a in documents],
        [trees.write_for(a, 1 << 40, 5).source.decode() for a in documents],
        [trees.document_hash(a.document) for a in documents if a.document is not None],
        [sorted(trees.touch(tree, name, {"id": 1, "p_id": 7, "c_id": 1},
                            {"id": 2, "p_id": 8, "c_id": 1}).refs) for name in ("s.c", "s.v")],
        compare.differences({"a": [{"b": 1}], "c": {"d": 2}}, {"a": [{"b": 2}], "c": {"d": 3}}),
        [trees.root_values_of_id(tree, i) for i in ("7", "-3")],
    ]


def corpus() -> list[Any]:
    lifecycle, alltypes = messages("t1_lifecycle.tsv"), messages("alltypes.tsv")
    schemaless = EnvelopeDecoder(ConnectorSettings(), {"price": "decimal(10,2)", "d": "date"})
    rows: list[dict[str, Any]] = [{"id": 1, "f": d, "s": "x", "n": None} for d in DOUBLES]
    return [
        decoded(EnvelopeDecoder(ConnectorSettings(), {}), lifecycle + alltypes + POISON,
                Epoch(0, 0, 0)),
        decoded(EnvelopeDecoder(ConnectorSettings(), {}), alltypes, Epoch(3, 1 << 10, 1)),
        decoded(schemaless, without_schemas(lifecycle) + without_schemas(alltypes) + POISON,
                Epoch(0, 0, 0)),
        every_shape(),
        [double_text(d) for d in DOUBLES],
        [hash_text(v) for v in [*DOUBLES, 12, -3, True, "é", [1, "a"], {"b": 1.5}]],
        [content_hash(row) for row in rows],
        [values.float32(d) for d in DOUBLES[:12]],
        [values.datetime_from_micros(m, fsp) for m in (0, -1, 1_700_000_000_123_456)
         for fsp in (0, 3, 6)],
        [values.time_from_micros(m, 6) for m in (0, -3_020_399_000_000, 45_296_789_012)],
        [document_id(k) for k in ({"id": 7}, {"a": "x|y", "b": 2}, {"id": 18446744073709551615})],
        [pack_binlog_version("mysql-bin.000042", 123_456, 7, Epoch(2, 1 << 9, 40))],
        joined(),
    ]


if __name__ == "__main__":
    sys.stdout.buffer.write(orjson.dumps(corpus()))
