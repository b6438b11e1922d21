"""Reading a table's mapping file (the definition itself is checked in core)."""

from pathlib import Path

import pytest

from indexer.errors import MappingError
from indexer.search.admin import load_definition

REPO = Path(__file__).parents[3]


def test_shipped_mapping_files_are_valid() -> None:
    files = sorted((REPO / "mappings").glob("*.json"))
    assert files
    for path in files:
        definition = load_definition(path, path.stem)
        assert "_indexer" in definition.mappings["properties"]


def test_bad_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("{")
    with pytest.raises(MappingError, match=r"a\.json: not valid JSON"):
        load_definition(path, "a")
