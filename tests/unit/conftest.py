import pytest

from tests.unit.corpus import messages as load_messages


@pytest.fixture
def lifecycle() -> list[tuple[bytes | None, bytes | None]]:
    return load_messages("t1_lifecycle.tsv")


@pytest.fixture
def alltypes() -> list[tuple[bytes | None, bytes | None]]:
    return load_messages("alltypes.tsv")
