"""The stage backlog's ``take``: bounded by what a lane held when the call began."""

from __future__ import annotations

import numpy as np

from driver_review.backlog import Lane, StageBacklog


def _backlog() -> StageBacklog:
    return StageBacklog("intake", batch_size=4, build=lambda rows, lane, now: rows, put=lambda b: b)


def test_rows_that_keep_sends_back_to_the_same_lane_wait_for_the_next_call() -> None:
    backlog = _backlog()
    backlog.push([1, 2, 3], Lane.FRESH, 0.0)
    calls = 0

    def keep(rows: np.ndarray, lane: Lane) -> np.ndarray:
        nonlocal calls
        calls += 1
        assert calls < 100, "take looped on rows keep sent back"
        backlog.push([int(r) for r in rows], Lane.FRESH, 0.0)  # dropped, queued again here
        return np.zeros(len(rows), dtype=bool)

    assert backlog.take(10, 1.0, keep) == []
    assert calls == 1 and len(backlog) == 3  # still queued, for the next call


def test_take_hands_out_at_most_n_fresh_first() -> None:
    backlog = _backlog()
    backlog.push([10, 11], Lane.STALE, 0.0)
    backlog.push([1, 2, 3, 4, 5], Lane.FRESH, 0.0)
    got = backlog.take(6, 1.0, lambda rows, lane: np.ones(len(rows), dtype=bool))
    rows = [int(r) for seg in got for r in seg.rows]
    assert rows == [1, 2, 3, 4, 5, 10] and len(backlog) == 1
