"""From a :class:`~driver_review.config.PipelineConfig` to the checks each stage runs.

Everything is resolved once, at load: a stage naming a check that does not exist, a python
target that does not import, or a builtin given options it does not know is a
:class:`~driver_review.errors.ConfigError` before any driver is touched, not an ``error``
verdict on every driver hours later.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from driver_review.auth import build_auth
from driver_review.catalog.models import DriverRecord
from driver_review.checks.base import Check, CheckContext, NamedCheck, Outcome, one_line
from driver_review.checks.builtin import BUILTINS
from driver_review.checks.http_check import HttpCheck
from driver_review.config import CheckSpec, PipelineConfig
from driver_review.errors import ConfigError


def as_outcome(name: str, result: object) -> Outcome:
    """A user check's return value as an :class:`Outcome` (``bool`` is accepted)."""
    if isinstance(result, Outcome):
        return result
    if isinstance(result, bool):
        return Outcome(result)
    # Raised, not failed: a check with a bug has not answered the question.
    raise TypeError(f"check {name} returned {type(result).__name__}, expected Outcome or bool")


def adapt(name: str, fn: Callable[..., Any]) -> Check:
    """Wrap a ``(driver, ctx)`` callable, sync or async, returning ``Outcome`` or ``bool``.

    A sync callable runs on the event loop: it should be quick. Heavy work belongs in an
    async check that hands it to ``ctx.run_cpu``.
    """

    async def run(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        result = fn(driver, ctx)
        if inspect.isawaitable(result):
            result = await result
        return as_outcome(name, result)

    run.__name__ = run.__qualname__ = name
    return run


def load_python_check(name: str, target: str) -> Check:
    """Import ``module:attr`` (``attr`` may be dotted) and adapt it."""
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            f"check {name}: cannot import {target!r}: {type(exc).__name__}: {one_line(exc)}"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"check {name}: {target!r} does not exist") from None
    if not callable(obj):
        raise ConfigError(f"check {name}: {target!r} is not callable")
    try:
        inspect.signature(obj).bind(None, None)
    except TypeError:
        raise ConfigError(f"check {name}: {target!r} must accept (driver, ctx)") from None
    except ValueError:
        pass  # no introspectable signature (some C callables): find out at call time
    return adapt(name, obj)


def build_check(name: str, spec: CheckSpec) -> NamedCheck:
    """The runnable check named ``name`` in the pipeline, as ``spec`` describes it."""
    options = MappingProxyType(dict(spec.options))
    if spec.kind == "builtin":
        builtin = BUILTINS.get(name)
        if builtin is None:
            raise ConfigError(
                f"unknown check {name!r}: not a builtin ({', '.join(BUILTINS)}) and no "
                f"entry under checks: with kind python or http"
            )
        unknown = sorted(set(options) - builtin.options)
        if unknown:
            accepted = ", ".join(sorted(builtin.options)) or "none"
            raise ConfigError(
                f"checks.{name}.options: unknown option {unknown[0]!r} (accepted: {accepted})"
            )
        # Builtins calling the catalog are already bounded by its client's timeouts and
        # retries; an overall bound applies only when the file sets one on purpose.
        explicit = "timeout_s" in spec.model_fields_set
        return NamedCheck(name, builtin.run, options, spec.timeout_s if explicit else None)
    if spec.kind == "python":
        assert spec.target is not None  # CheckSpec guarantees it
        return NamedCheck(name, load_python_check(name, spec.target), options, spec.timeout_s)
    assert spec.url is not None  # CheckSpec guarantees it
    # The http check bounds its own exchanges by timeout_s and its retries by max_wait_s,
    # and says which in its error. Its credentials are read from the environment now.
    check = HttpCheck(
        name,
        spec.url,
        spec.timeout_s,
        auth=build_auth(spec.auth, f"checks.{name}.auth"),
        rate_key=spec.rate_key,
        max_attempts=spec.max_attempts,
        max_wait_s=spec.max_wait_s,
    )
    return NamedCheck(name, check, options, None)


def build_stage_checks(config: PipelineConfig) -> dict[str, list[NamedCheck]]:
    """Every stage's checks, in pipeline order; raises ConfigError naming the first check
    that does not resolve."""
    built: dict[str, NamedCheck] = {}
    stages: dict[str, list[NamedCheck]] = {}
    for stage in config.stages:
        for name in stage.checks:
            if name not in built:
                try:
                    built[name] = build_check(name, config.check_spec(name))
                except ConfigError as exc:
                    raise ConfigError(f"stage {stage.name!r}: {exc}") from None
        stages[stage.name] = [built[name] for name in stage.checks]
    return stages
