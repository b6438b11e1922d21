"""Transforms the tests name in their configurations (``tests.transforms:...``): pure
functions of the document, as the README asks of a transform."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def priced(doc: dict[str, Any]) -> dict[str, Any] | None:
    """``full_name`` from two columns, the price in cents, hidden rows not indexed; a negative
    price is a bug this function does not handle (it raises)."""
    if doc.get("status") == "hidden":
        return None
    cents = Decimal(doc["price"]) * 100
    if cents < 0:
        raise ValueError(f"negative price {doc['price']}")
    doc["full_name"] = f"{doc['first']} {doc['last']}"
    doc["cents"] = int(cents)
    del doc["price"]
    return doc


def not_a_document(doc: dict[str, Any]) -> Any:
    return [doc]


def claims_indexer(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "_indexer": {}}


NOT_CALLABLE = 3


def shelf(doc: dict[str, Any]) -> dict[str, Any] | None:
    """A joined product: the grams of its variants summed, none without variants; a product
    named "boom" is a bug this function does not handle."""
    if doc["name"] == "boom":
        raise RuntimeError("boom")
    if not doc["variants"]:
        return None
    doc["grams"] = sum(v["grams"] or 0 for v in doc["variants"])
    return doc
