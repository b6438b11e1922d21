import io

from rich.console import Console

from indexer.jobs.reconcile import Report
from indexer.report import terminal


def report(**overrides: object) -> Report:
    r = Report(table="shop.products_with_a_long_name", alias="products",
               started_at="2026-12-01T00:00:00Z", rows=198_765_432, documents=198_765_431,
               chunks=12_345)
    for k, v in overrides.items():
        setattr(r, k, v)
    return r


def test_output_that_is_not_a_terminal_is_complete() -> None:
    out = io.StringIO()
    r = report(missing=[f"{i}" for i in range(10_000_000, 10_000_012)], stale=["7"])
    terminal.render(Console(file=out, width=40), [r])
    lines = out.getvalue().splitlines()
    header, row = lines[1].split(), lines[2].split()
    assert header == list(terminal.COLUMNS)
    assert row[:4] == ["shop.products_with_a_long_name", "198,765,432", "198,765,431", "12,345"]
    assert row[5] == "12" and row[7] == "1"
    # The id list is one line however long, with the count of what is left out.
    assert lines[3].startswith("shop.products_with_a_long_name missing: 10000000, 10000001")
    assert lines[3].endswith("… and 2 more")
    assert lines[4] == "shop.products_with_a_long_name stale: 7"
    assert "…" not in "\n".join(lines[:3])


def test_columns_align() -> None:
    lines = terminal.plain_lines([["a", "1", "1", "1", "0", "0", "0", "0", "-", "0.1"],
                                  ["bb", "1,000", "1", "1", "0", "0", "0", "0", "-", "12.5"]])
    assert len({len(line) for line in lines[1:]}) == 1  # right-aligned to one width
