import zlib
from types import ModuleType
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from indexer.core.checksums import (
    NativeHasher,
    content_hash,
    double_text,
    hash_text,
    normal_json,
)
from indexer.core.geometry import Geometry


def test_hash_texts_match_what_the_sql_side_writes() -> None:
    assert [hash_text(v) for v in (True, False, 7, -1, "7.90", 1.5, ["a", "c"], [],
                                   {"a": [1, 2.5]})] == [
        "1", "0", "7", "-1", "7.90", "1.5", '["a","c"]', "[]", '{"a":[1.0E0,2.5E0]}']


# What MariaDB 10.11's JSON_NORMALIZE wrote for the same values (given as the texts in the
# comments): numbers by their digits whatever their text, keys by their bytes, no spaces.
@pytest.mark.parametrize(("value", "text"), [
    (0, "0.0E0"), (-0.0, "0.0E0"), (1, "1.0E0"), (-1, "-1.0E0"), (10, "1.0E1"), (100, "1.0E2"),
    (123, "1.23E2"), (1.5, "1.5E0"), (-1.5e-10, "-1.5E-10"), (1e300, "1.0E300"),
    (1.7976931348623157e308, "1.7976931348623157E308"), (5e-324, "5.0E-324"), (0.1, "1.0E-1"),
    (0.000001, "1.0E-6"), (1.0e5, "1.0E5"), (2e-3, "2.0E-3"), (12.34, "1.234E1"),  # "12.3400"
    (-0.5, "-5.0E-1"), (1234567.0, "1.234567E6"), (10**22, "1.0E22"),
    (12345678901234567890, "1.234567890123456789E19"),
    (True, "true"), (None, "null"), ("x\"y", '"x\\"y"'), ([], "[]"), ({}, "{}"),
    ({"b": {"z": 1, "a": [{"y": 2, "x": 1}]}, "a": 1, "": None, "é": 1, "e": 2, "ab": 3,
      "A": 5, "a b": 1, "a!": 3, "Ω": 6, "😀": 8, "ﬀ": 9},
     '{"":null,"A":5.0E0,"a":1.0E0,"a b":1.0E0,"a!":3.0E0,"ab":3.0E0,'
     '"b":{"a":[{"x":1.0E0,"y":2.0E0}],"z":1.0E0},"e":2.0E0,"é":1.0E0,"Ω":6.0E0,"ﬀ":9.0E0,'
     '"😀":8.0E0}'),
])
def test_json_is_hashed_as_json_normalize_writes_it(value: object, text: str) -> None:
    assert normal_json(value) == text


def test_checksum_covers_names_sorted_and_skips_nulls() -> None:
    assert content_hash({"b": "x", "a": 1}) == zlib.crc32(b"#a=1#b=x")
    assert content_hash({"a": 1, "b": "x"}) == content_hash({"b": "x", "a": 1})
    # renamed, dropped and added columns change it even when every shared value matches
    assert content_hash({"a": 1}) != content_hash({"c": 1})
    assert content_hash({"a": 1, "b": 2}) != content_hash({"a": 1})
    # a NULL column and an absent field are the same content
    assert content_hash({"a": 1, "b": None}) == content_hash({"a": 1})
    assert content_hash({"a": None}) == content_hash({}) == 0


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (-0.0, "0"), (100.0, "100"), (0.1, "0.1"), (-2.5, "-2.5"),
    (1e14, "100000000000000"), (1e15, "1e15"), (1e16, "1e16"), (1e20, "1e20"),
    (1.2345678901234568e17, "1.2345678901234568e17"), (1234567890123456.8, "1234567890123456.8"),
    (0.0001, "0.0001"), (1e-05, "0.00001"), (2.5e-07, "0.00000025"),
    (1e-15, "0.000000000000001"), (1.5e-15, "0.0000000000000015"),
    (1e-16, "1e-16"), (1.5e-16, "1.5e-16"), (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e308"),
    (-2.2250738585072014e-308, "-2.2250738585072014e-308"),
    (123456.703125, "123456.703125"), (3.3999999521443642e38, "3.3999999521443642e38"),
])
def test_doubles_are_written_as_the_server_writes_them(value: float, text: str) -> None:
    assert double_text(value) == text
    assert float(text) == value


class _Text(str):
    """A str subclass: the reference hashes it through hash_text, as the native side must."""


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)
_values = (st.none() | st.booleans() | st.text() | st.integers()
           | st.integers(min_value=-(2**80), max_value=2**80) | st.floats(allow_nan=False)
           | st.builds(_Text, st.text(max_size=5)) | _json
           | st.builds(lambda b: Geometry({"type": "Point", "coordinates": [1.0, 2.0]}, b),
                       st.binary(min_size=1, max_size=8)))


@settings(max_examples=400)
@given(doc=st.dictionaries(st.text(min_size=1, max_size=6), _values, max_size=8),
       spaced=st.booleans())
@example(doc={"b": "x", "a": 1, "c": None, "é": 2**64, "ab": True, "Ω": "\ud800"}, spaced=False)
@example(doc={"z": 2**63 - 1, "y": -(2**63), "x": 2**63, "w": "", "v": [1, {"b": 2.5}]},
         spaced=True)
def test_the_native_content_hash_is_the_reference_s(module: ModuleType, doc: dict[str, Any],
                                                    spaced: bool) -> None:
    native = NativeHasher(module.content_hash)
    try:
        expected: int | str = content_hash(doc, spaced)
    except UnicodeEncodeError as exc:  # a lone surrogate: declined, the reference raises
        expected = type(exc).__name__
        assert module.content_hash(doc, spaced, hash_text) is None
    try:
        found: int | str = native(doc, spaced)
    except UnicodeEncodeError as exc:
        found = type(exc).__name__
    assert found == expected


def test_the_native_content_hash_takes_plain_documents_declines_names_not_text(
        module: ModuleType) -> None:
    assert module.content_hash({"b": "x", "a": 1, "c": None}, False, hash_text) == zlib.crc32(
        b"#a=1#b=x")
    doc: dict[Any, Any] = {1: "a", "b": 2}
    assert module.content_hash(doc, False, hash_text) is None
