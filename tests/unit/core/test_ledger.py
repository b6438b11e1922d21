"""The in-order offset ledger: nothing is committed past a batch still being written or one
that failed, whatever order the batches end in."""

from indexer.core.ledger import OffsetLedger


def test_offsets_are_handed_out_in_the_order_the_batches_were_read() -> None:
    ledger: OffsetLedger[str, object] = OffsetLedger()
    first, second, third = object(), object(), object()
    ledger.add(first, {"p0": 10})
    ledger.add(second, {"p0": 20, "p1": 5})
    ledger.add(third, {"p1": 9})
    assert (len(ledger), ledger.oldest) == (3, first)
    ledger.finish(second)  # done early: p0 waits for the first; no earlier batch read p1
    assert ledger.take() == {"p1": 5}
    ledger.finish(first)
    assert ledger.take() == {"p0": 20}  # both batches' p0, merged, the later offset wins
    assert ledger.take() == {}  # handed out once
    ledger.finish(third)
    assert ledger.take() == {"p1": 9} and len(ledger) == 0 and ledger.oldest is None


def test_a_failed_batch_stops_the_commits_at_it() -> None:
    ledger: OffsetLedger[str, object] = OffsetLedger()
    first, second, third = object(), object(), object()
    for tag, offset in ((first, 1), (second, 2), (third, 3)):
        ledger.add(tag, {"p0": offset})
    failure = RuntimeError("refused")
    ledger.finish(second, failure)  # fails while the first is still being written
    ledger.finish(third)
    assert ledger.failure is None  # not yet: the first may still succeed
    ledger.finish(first)
    assert ledger.take() == {"p0": 1} and ledger.failure is failure
    assert ledger.in_flight() == [second, third]  # neither is ever committed


def test_abandoned_batches_are_forgotten_and_their_end_changes_nothing() -> None:
    ledger: OffsetLedger[str, object] = OffsetLedger()
    first, second = object(), object()
    ledger.add(first, {"p0": 1})
    ledger.add(second, {"p0": 2})
    assert ledger.abandon() == [first, second] and len(ledger) == 0
    ledger.finish(first, RuntimeError("cancelled"))  # its task ends after the abandon
    assert ledger.failure is None and ledger.take() == {}


def test_a_partition_held_by_a_fan_out_waits_alone() -> None:
    ledger: OffsetLedger[str, object] = OffsetLedger()
    fanning, after = object(), object()
    ledger.add(fanning, {"categories": 4, "products": 10})
    ledger.add(after, {"categories": 6, "products": 30})
    ledger.finish(fanning, partitions={"products"})  # its category change still rebuilding
    ledger.finish(after)
    assert ledger.take() == {"products": 30}  # unrelated partitions go on
    assert ledger.holds(fanning) and not ledger.holds(after) and len(ledger) == 2
    ledger.finish(fanning, partitions={"categories"})
    assert ledger.take() == {"categories": 6} and len(ledger) == 0
