from types import ModuleType

import pytest

from indexer.build import load_native
from tests.unit.corpus import messages as load_messages


@pytest.fixture
def lifecycle() -> list[tuple[bytes | None, bytes | None]]:
    return load_messages("t1_lifecycle.tsv")


@pytest.fixture
def alltypes() -> list[tuple[bytes | None, bytes | None]]:
    return load_messages("alltypes.tsv")


@pytest.fixture(scope="module")
def module() -> ModuleType:
    """The native module, for the tests that hold it to the Python reference."""
    found = load_native()
    if found is None:
        pytest.skip("no native module in this build (dev/test.sh requires it)")
    return found
