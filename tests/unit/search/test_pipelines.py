from indexer.search.pipelines import touched


def test_the_fields_a_pipeline_adds_removes_or_changes() -> None:
    document = {"id": 1, "name": "a", "price": "1.00", "gone": None}
    piped = {"id": 1, "name": "A", "price": "1.00", "cents": 100}
    assert touched(document, piped) == ["cents", "gone", "name"]
    assert touched(document, dict(document)) == []
    assert touched(document, None) == sorted(document)  # dropped: nothing left to compare
