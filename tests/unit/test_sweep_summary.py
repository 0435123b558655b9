"""The sweep's summary and its one-line failure: pure logic, no Ray."""

from __future__ import annotations

from driver_review.sweep import failure_line, summarize


def _summary(**kw):
    base = dict(listed=10, final_states={"published": 7, "rejected": 1, "in_review": 2},
                decisions={"approved": 9}, wall_s=2.0, listing_calls={"list": {"200": 1}},
                instance="sweep-x", data_dir="/d")
    return summarize({}, **(base | kw))


def test_a_finished_sweep_is_ok_and_has_no_failure_line() -> None:
    summary = _summary()
    assert summary["ok"] and summary["reason"] is None and summary["unresolved"] == 0
    assert not summary["timed_out"]
    assert failure_line(summary) == ""


def test_unresolved_is_reported_as_counted_never_forced_to_zero() -> None:
    summary = _summary(reason="timed out after 600 s", unresolved=37)
    assert not summary["ok"] and summary["timed_out"] and summary["unresolved"] == 37
    assert failure_line(summary) == (
        "sweep did not finish: timed out after 600 s with 37 drivers unresolved")


def test_a_reason_other_than_time_is_not_a_timeout() -> None:
    summary = _summary(reason="orchestrator unreachable for 60 s (ActorDiedError)",
                       unresolved=5, restarts=2)
    assert not summary["ok"] and not summary["timed_out"]
    assert summary["orchestrator_restarts"] == 2
    assert "\n" not in failure_line(summary)
    assert summary["final_states"] == {"published": 7, "rejected": 1, "in_review": 2}
