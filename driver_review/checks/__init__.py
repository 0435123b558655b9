"""Checks: what a stage asks of a driver, one async callable each.

Write your own as ``async def my_check(driver, ctx) -> Outcome`` (a sync function or one
returning ``bool`` works too) and name it in the pipeline file::

    checks:
      my_check: {kind: python, target: "my_pkg.checks:my_check", options: {limit: 3}}
    stages:
      - {name: intake, checks: [metadata_complete, my_check]}

Return ``Outcome.fail(reason)`` when the driver is wrong; *raise* when you cannot tell
(the stage then ends in ``error`` and is retried later, never rejected for it).
"""

from driver_review.checks.base import Check, CheckContext, NamedCheck, Outcome, context_factory
from driver_review.checks.builtin import BUILTINS
from driver_review.checks.registry import build_check, build_stage_checks
from driver_review.checks.runner import CheckResult, StageResult, run_stage

__all__ = [
    "BUILTINS",
    "Check",
    "CheckContext",
    "CheckResult",
    "NamedCheck",
    "Outcome",
    "StageResult",
    "build_check",
    "build_stage_checks",
    "context_factory",
    "run_stage",
]
