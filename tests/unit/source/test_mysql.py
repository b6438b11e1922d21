import itertools

from indexer.source.mysql import open_slices


def test_open_slices_cover_everything_once() -> None:
    assert open_slices(1, 100, 2) == [(None, 50), (51, None)]
    assert open_slices(0, 9, 3) == [(None, 3), (4, 7), (8, None)]
    assert open_slices(5, 5, 4) == [(None, None)]
    slices = open_slices(-7, 1000, 5)
    assert slices[0][0] is None and slices[-1][1] is None
    for (_, end), (start, _) in itertools.pairwise(slices):
        assert end is not None and start == end + 1
