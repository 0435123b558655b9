"""``driver-review status`` as text: every endpoint's pacing on one line, with the limit
learnt, the pause and its reason (a quota with its window) and a warm start."""

from __future__ import annotations

from driver_review.governor import RateGovernor
from driver_review.status import format_status, governor_line


def test_a_discovering_endpoint_shows_its_rate_and_429s() -> None:
    gov = RateGovernor(key="https://scan.example:443").stats(0.0)
    assert governor_line(gov) == "slow_start at 5.0/s, 0 429s"


def test_a_quota_pause_names_the_quota_and_its_window_and_a_warm_start_its_age() -> None:
    gov = {
        "state": "paused",
        "rate": 2.0,
        "limit_estimate": 12.25,
        "429s": 3,
        "echo_pauses": 1,
        "shut_pauses": 2,
        "window_s": 64.6,
        "paused_for_s": 3600.4,
        "pause_reason": "quota 'daily' exhausted",
        "quota_window_s": 86400.0,
        "warm_start": {"learnt_at": 1.0, "age_s": 95.2},
    }
    assert governor_line(gov) == (
        "paused at 2.0/s (limit ~12.2/s), 3 429s, 1 echo pauses, 2 pauses while shut, window "
        "~65s; paused 3600s more: quota 'daily' exhausted, window 86400s; warm start from a "
        "limit learnt 95s before"
    )


def test_the_status_text_has_a_line_per_endpoint() -> None:
    status = {
        "instance": "prod",
        "ok": True,
        "governor": {
            "http://catalog:8080": {"state": "aimd", "rate": 98.0, "limit_estimate": 100.0},
            "https://scan:443": {"state": "header", "rate": 9.8, "header_rate": 10.0},
        },
    }
    lines = format_status(status)
    assert "  governor http://catalog:8080: aimd at 98.0/s (limit ~100.0/s), 0 429s" in lines
    assert "  governor https://scan:443: header at 9.8/s (limit ~10.0/s), 0 429s" in lines


def test_a_stage_with_a_worker_not_answering_says_so() -> None:
    pool = {"workers": 2, "in_flight": 9, "waiting_for_permit": 0}
    status = {
        "instance": "prod",
        "ok": True,
        "backlog": {"intake": {"queued": 40}},
        "pools": {"intake": {**pool, "not_answering": 1}, "security": pool},
    }
    lines = format_status(status)
    intake = next(line for line in lines if line.startswith("  intake"))
    security = next(line for line in lines if line.startswith("  security"))
    assert intake.endswith("(1 not answering: a check blocks its loop?)"), intake
    assert "not answering" not in security
