import zlib

import pytest

from indexer.core.checksums import content_hash, double_text, hash_text


def test_hash_texts_match_what_the_sql_side_writes() -> None:
    assert [hash_text(v) for v in (True, False, 7, -1, "7.90", 1.5, ["a", "c"], [],
                                   {"a": [1, 2.5]})] == [
        "1", "0", "7", "-1", "7.90", "1.5", '["a","c"]', "[]", '{"a":[1,2.5]}']


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
