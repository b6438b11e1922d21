from datetime import UTC, datetime, timedelta, timezone

import pytest

from indexer.core import values


@pytest.mark.parametrize(
    ("unscaled", "scale", "text"),
    [(150, 2, "1.50"), (-5, 3, "-0.005"), (0, 2, "0.00"), (7, 0, "7"), (12, -2, "1200"),
     (-123456789012345678901234567890, 10, "-12345678901234567890.1234567890")],
)
def test_decimal_from_unscaled_is_exact(unscaled: int, scale: int, text: str) -> None:
    assert values.decimal_from_unscaled(unscaled, scale) == text


def test_decimal_from_base64_matches_connect_encoding() -> None:
    assert values.decimal_from_base64("AJY=", 2) == "1.50"  # 150 big-endian
    assert values.decimal_from_base64("/nEW8Ak8jB8RscD1Lg==", 10) == (
        "-12345678901234567890.1234567890")


def test_bad_base64_decimal_raises_value_error() -> None:
    with pytest.raises(ValueError, match="base64"):
        values.decimal_from_base64("not base64!", 2)


def test_dates() -> None:
    assert values.date_from_days(19782) == "2024-02-29"
    assert values.date_from_days(-719162) == "0001-01-01"


def test_year_0000_is_0_though_debezium_sends_1900() -> None:
    # YEAR holds 1901-2155 and 0000: a 1900 can only be Debezium's 0000.
    assert [values.year(y) for y in (1900, 1901, 2155, 0)] == [0, 1901, 2155, 0]


@pytest.mark.parametrize(
    ("micros", "fsp", "text"),
    [(1704164645123456, 6, "2024-01-02T03:04:05.123456"),
     (1704164645123456, 3, "2024-01-02T03:04:05.123"),
     (1704164645123456, 0, "2024-01-02T03:04:05"),
     (-62135596800000000, 0, "0001-01-01T00:00:00"),
     (-1, 6, "1969-12-31T23:59:59.999999"),
     (0, 6, "1970-01-01T00:00:00.000000"),
     (1500, 2, "1970-01-01T00:00:00.00"),
     (253402300799999999, 6, "9999-12-31T23:59:59.999999")],
)
def test_datetime_from_micros(micros: int, fsp: int, text: str) -> None:
    assert values.datetime_from_micros(micros, fsp) == text


def test_datetime_formats_agree_between_event_and_row() -> None:
    row_value = datetime(2024, 1, 2, 3, 4, 5, 120000)
    assert values.format_datetime(row_value, 2) == values.datetime_from_micros(
        1704164645120000, 2) == "2024-01-02T03:04:05.12"


def test_timestamps_are_utc_with_z() -> None:
    assert values.timestamp_from_iso("2024-01-02T03:04:05.000001Z", 6) == (
        "2024-01-02T03:04:05.000001Z")
    assert values.timestamp_from_iso("2024-01-02T03:04:05Z", 3) == "2024-01-02T03:04:05.000Z"
    plus_two = datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert values.format_timestamp(plus_two, 0) == "2024-01-02T03:04:05Z"
    assert values.format_timestamp(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), 0) == (
        "2024-01-02T03:04:05Z")


def test_time_is_a_signed_duration() -> None:
    assert values.time_from_micros(-3020399000000, 0) == "-838:59:59"
    assert values.time_from_micros(45296789012, 6) == "12:34:56.789012"
    assert values.time_from_micros(45296789012, 2) == "12:34:56.78"


def test_bits_sets_binary_and_unsigned() -> None:
    assert values.bits_from_base64_le("qgo=") == 0b101010101010
    assert values.set_members("a,c") == ["a", "c"]
    assert values.set_members("") == []
    assert values.unsigned_from_signed_long(-1) == 18446744073709551615
    assert values.unsigned_from_signed_long(5) == 5
