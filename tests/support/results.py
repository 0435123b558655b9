"""Decision rows as a stage worker writes them, for tests of the results, the report and
the history page."""

from __future__ import annotations

from driver_review.results import ResultRow


def result_row(
    driver_id: str,
    reviewed_at: float,
    *,
    version: str = "1.0",
    stage: str = "intake",
    failed: str | None = None,
    reason: str = "bad id",
    waited_s: float = 0.5,
    worker: str = "w1",
) -> ResultRow:
    """One fresh-lane decision: approved after one passing check, or, when ``failed``
    names a check, rejected by it for ``reason``. It was queued ``waited_s`` before."""
    checks = [{"name": "metadata_complete", "outcome": "passed", "reason": "", "duration_s": 0.001}]
    if failed:
        checks.append({"name": failed, "outcome": "failed", "reason": reason, "duration_s": 0.25})
    return ResultRow(
        driver_id=driver_id,
        version=version,
        stage=stage,
        verdict="rejected" if failed else "approved",
        reasons={failed: reason} if failed else {},
        checks=checks,
        reviewed_at=reviewed_at,
        queued_at=reviewed_at - waited_s,
        duration_s=0.3,
        lane="fresh",
        worker=worker,
    )
