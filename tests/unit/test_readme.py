"""What the README says about settings is what the code does: the configuration block's
section and setting names exist, and the defaults it gives are the defaults."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from indexer.config import SECTIONS

README = Path(__file__).parents[2] / "README.md"
UNITS = {"MiB": 1024 * 1024, "days": 24 * 3600}


def configuration_block() -> dict[str, str]:
    """section -> the comment the README's configuration block gives it."""
    text = README.read_text()
    block = text[text.index("## Configuration"):]
    block = block[block.index("```toml") + 7:block.index("[[tables]]")]
    sections: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        found = re.match(r"^\[(\w+)\]\s*#(.*)$", line)
        if found:
            current = found.group(1)
            sections[current] = found.group(2)
        elif current and line.strip().startswith("#"):
            sections[current] += " " + line.strip()[1:]
    return sections


def stated_defaults(comment: str) -> dict[str, str]:
    """``name (default...)`` pairs of a section's comment."""
    return {name: value for name, value in re.findall(r"\b([a-z_]+) \(([^)]*)\)", comment)
            if re.match(r'^(?:-?[0-9]|true\b|false\b|")', value)}


def parsed(text: str, default: Any) -> Any:
    first = re.split(r"[;:,]", text)[0].strip().strip('"')  # a list of choices: the default first
    if isinstance(default, bool):
        return {"true": True, "false": False}.get(first, first)
    if isinstance(default, int | float):
        number, _, unit = first.partition(" ")
        value = float(number) * UNITS.get(unit, 1)
        return type(default)(value)
    return first


def test_every_section_the_readme_names_exists() -> None:
    assert set(configuration_block()) <= set(SECTIONS)


@pytest.mark.parametrize("section", sorted(configuration_block()))
def test_the_readme_gives_each_settings_default(section: str) -> None:
    defaults = {f.name: f.default for f in fields(SECTIONS[section])
                if f.default is not MISSING}
    names = {f.name for f in fields(SECTIONS[section])}
    comment = configuration_block()[section]
    checked = 0
    for name, text in stated_defaults(comment).items():
        if name not in names:
            continue  # prose, not a setting: "(the names to watch; ...)"
        default = defaults.get(name)
        if default is None or text.startswith(("default", '"<')):
            continue  # computed from others: said in words
        assert parsed(text, default) == default, (section, name, text, default)
        checked += 1
    # every word that looks like a setting before a comma is one
    listed = re.findall(r"(?:^|,|;)\s*([a-z_]+)(?=[\s,(;:]|$)", comment)
    unknown = [n for n in listed if "_" in n and n not in names]
    assert not unknown, (section, unknown)
    if stated_defaults(comment):
        assert checked or section in ("canary",), section
