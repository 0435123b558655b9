"""Choosing the catalog adapter: ``catalog.adapter: "package.module:factory"``.

The factory is called once per process that talks to the catalog (the poller, each stage
worker, the cache, a sweep) as::

    factory(config, limiter=limiter, on_response=on_response, stages=stage_names)

with the validated :class:`~driver_review.config.CatalogConfig`, the
:class:`~driver_review.catalog.base.Limiter` of the catalog's endpoint key (call
``acquire()`` before every request and ``observe()`` with every response: that is what
keeps the vendor at its limit), the response hook (``on_response(route, status, elapsed_s)``
feeds the call metrics) and the pipeline's stage names. It returns an object that has the
methods of :class:`~driver_review.catalog.base.Catalog`. A class whose constructor takes
those arguments is itself a factory: the default is the REST adapter,
``driver_review.catalog.http:HttpCatalog``. ``tests/integration/other_vendor.py`` is a
worked example over an API of another shape.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from driver_review.catalog.base import Catalog, Limiter
from driver_review.config import CatalogConfig
from driver_review.errors import ConfigError

DEFAULT_ADAPTER = "driver_review.catalog.http:HttpCatalog"

#: ``on_response(route, status, elapsed_s)``; ``status`` is None when no response came.
ResponseHook = Callable[[str, int | None, float], None]


class CatalogFactory(Protocol):
    def __call__(
        self,
        config: CatalogConfig,
        *,
        limiter: Limiter | None,
        on_response: ResponseHook | None,
        stages: Sequence[str],
    ) -> Catalog: ...


def load_factory(spec: str | None) -> CatalogFactory:
    """The factory named by ``spec`` (``module:attr``; None for the REST adapter), or a
    one-line :class:`ConfigError` saying why it cannot be used."""
    spec = spec or DEFAULT_ADAPTER
    module_name, _, attr = spec.partition(":")
    where = f"catalog.adapter {spec!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import {module_name}: {exc}") from None
    factory: Any = getattr(module, attr, None)
    if factory is None:
        raise ConfigError(f"{where}: {module_name} has no attribute {attr!r}")
    if not callable(factory):
        raise ConfigError(f"{where}: {attr} is not callable")
    return factory


def build_catalog(
    config: CatalogConfig,
    *,
    limiter: Limiter | None,
    on_response: ResponseHook | None,
    stages: Sequence[str],
) -> Catalog:
    """The configured adapter, built, and checked to have every method of the protocol."""
    catalog = load_factory(config.adapter)(
        config, limiter=limiter, on_response=on_response, stages=list(stages)
    )
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(catalog, m, None))]
    if missing:
        raise ConfigError(
            f"catalog.adapter {config.adapter!r}: the object it built has no "
            f"{', '.join(missing)} (see driver_review.catalog.base.Catalog)"
        )
    return catalog


REQUIRED_METHODS = (
    "iter_drivers",
    "changes_since",
    "get_driver",
    "get_package",
    "run_check",
    "put_decision",
    "aclose",
    "stats",
)
