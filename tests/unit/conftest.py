from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def load_messages(name: str) -> list[tuple[bytes | None, bytes | None]]:
    """Messages recorded from Debezium 3.5.0's MariaDB connector: key TAB value per line."""
    messages = []
    for line in (FIXTURES / name).read_bytes().splitlines():
        key, value = line.split(b"\t", 1)
        messages.append((None if key == b"null" else key, None if value == b"null" else value))
    return messages


@pytest.fixture
def lifecycle() -> list[tuple[bytes | None, bytes | None]]:
    return load_messages("t1_lifecycle.tsv")


@pytest.fixture
def alltypes() -> list[tuple[bytes | None, bytes | None]]:
    return load_messages("alltypes.tsv")
