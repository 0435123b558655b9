"""The pipeline configuration: one pydantic model, loaded and validated once, passed down.

The default pipeline ships as ``default_pipeline.yaml`` beside this module. A wrong file
gives a :class:`~driver_review.errors.ConfigError` whose one-line message names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from driver_review.auth import AuthConfig, check_environment
from driver_review.errors import ConfigError, one_line
from driver_review.stage_names import migration_problem

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_pipeline.yaml")
#: Actor-name prefix of the always-on service; sweeps use ``sweep-<random>``.
DEFAULT_INSTANCE = "main"

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
# Shown in status and metric labels: a plain name, never a URL with credentials in it.
RateKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,127}$")]


class _Strict(BaseModel):
    # A misspelt key is a mistake, not something to ignore silently.
    model_config = ConfigDict(extra="forbid", frozen=True)


class CatalogConfig(_Strict):
    url: str = "http://127.0.0.1:8080"
    timeout_s: PositiveFloat = 10.0
    connect_timeout_s: PositiveFloat = 3.0
    max_attempts: PositiveInt = 6
    backoff_base_s: PositiveFloat = 0.05
    backoff_max_s: PositiveFloat = 10.0
    page_size: Annotated[int, Field(gt=0, le=1000)] = 500
    max_connections: PositiveInt = 64
    # Byte caps on response bodies: a body over its cap is an error, read no further.
    max_page_bytes: PositiveInt = 16 * 1024 * 1024  # listing and changes pages
    max_record_bytes: PositiveInt = 1024 * 1024  # driver records and other JSON answers
    max_package_bytes: PositiveInt = 256 * 1024 * 1024  # driver packages
    #: Credentials from the environment (see :mod:`driver_review.auth`); never in ``url``.
    auth: AuthConfig | None = None
    #: The governor key (default ``scheme://host:port`` of ``url``): share or split pacing.
    rate_key: RateKey | None = None
    #: ``package.module:factory`` of the adapter (see :mod:`driver_review.catalog.adapter`);
    #: None for the REST adapter of the contract.
    adapter: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] | None = None


class GovernorConfig(_Strict):
    initial_rate: PositiveFloat = 5.0
    min_rate: PositiveFloat = 0.5
    max_rate: PositiveFloat = 10_000.0
    lease_size: Annotated[int, Field(gt=0, le=1000)] = 8
    #: What an earlier run learnt of an endpoint (kept under the data dir) is trusted this
    #: long, and re-verified as it is used; 0 starts every run cold.
    warm_start_s: Annotated[float, Field(ge=0)] = 3600.0


class PoolConfig(_Strict):
    min_workers: Annotated[int, Field(ge=0)] = 1
    max_workers: PositiveInt = 4
    max_in_flight: PositiveInt = 32
    idle_shrink_s: PositiveFloat = 30.0

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_workers > self.max_workers:
            raise ValueError("min_workers must be <= max_workers")
        return self


class StageConfig(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    checks: Annotated[list[str], Field(min_length=1)]
    pool: PoolConfig = PoolConfig()

    @field_validator("checks")
    @classmethod
    def _unique_checks(cls, checks: list[str]) -> list[str]:
        # Results and decision reasons are keyed by check name; a repeat would collide.
        seen: set[str] = set()
        for check in checks:
            if check in seen:
                raise ValueError(f"check {check!r} is listed twice")
            seen.add(check)
        return checks


class CheckSpec(_Strict):
    """How a check is implemented.

    ``builtin``: one of the shipped checks, by name. ``python``: a callable named
    ``module:attr`` (see :mod:`driver_review.checks`). ``http``: a POST of
    ``{driver_id, version}`` to ``url`` answering ``{passed, reason}``, paced by the
    governor under ``rate_key`` (default: the url's ``scheme://host:port``), with
    ``auth`` from the environment. A 429 (or a 503 with Retry-After) is waited out and
    retried, up to ``max_attempts`` tries within ``max_wait_s`` (permit waits included);
    beyond that the check is an ``error``, retried later.
    """

    kind: Literal["builtin", "python", "http"] = "builtin"
    target: str | None = None
    url: str | None = None
    timeout_s: PositiveFloat = 10.0
    options: dict[str, float | int | str | bool] = Field(default_factory=dict)
    auth: AuthConfig | None = None
    rate_key: RateKey | None = None
    max_attempts: Annotated[int, Field(gt=0, le=20)] = 5
    max_wait_s: PositiveFloat = 60.0

    @model_validator(mode="after")
    def _target(self) -> Self:
        if self.kind == "python" and not (self.target and ":" in self.target):
            raise ValueError("a python check needs target: 'module:callable'")
        if self.kind == "http" and not self.url:
            raise ValueError("an http check needs url")
        if self.kind == "builtin" and (self.target or self.url):
            # Most likely a forgotten `kind:`; silently running the builtin would be worse.
            raise ValueError("target/url given but kind is builtin (set kind: python or http)")
        if self.kind != "http" and (self.auth or self.rate_key):
            # Builtins reach the catalog through its client (catalog.auth, its key).
            raise ValueError(f"auth/rate_key apply to http checks only, not kind {self.kind}")
        return self


class WindowConfig(_Strict):
    bucket_s: PositiveFloat = 300.0
    freshness_s: PositiveFloat = 86_400.0
    high_water: PositiveInt = 50_000
    batch_size: Annotated[int, Field(gt=0, le=10_000)] = 64
    lease_s: PositiveFloat = 120.0
    skew_overlap_s: Annotated[float, Field(ge=0)] = 5.0
    snapshot_s: PositiveFloat = 30.0  # ledger + watermark snapshot period (service only)
    # Removed stage -> the current stage that takes the drivers a snapshot has there
    # (see driver_review/stage_names.py); without it a removed stage refuses the start.
    migrate_stages: dict[str, str] = Field(default_factory=dict)


class CacheConfig(_Strict):
    max_entries: PositiveInt = 100_000
    max_bytes: PositiveInt = 512 * 1024 * 1024


class ResultsConfig(_Strict):
    rollover_rows: PositiveInt = 10_000
    rollover_s: PositiveFloat = 30.0


class PipelineConfig(_Strict):
    stages: Annotated[list[StageConfig], Field(min_length=1)]
    checks: dict[str, CheckSpec] = Field(default_factory=dict)
    catalog: CatalogConfig = CatalogConfig()
    governor: GovernorConfig = GovernorConfig()
    window: WindowConfig = WindowConfig()
    cache: CacheConfig = CacheConfig()
    results: ResultsConfig = ResultsConfig()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names repeat: {names}")
        problem = migration_problem(self.window.migrate_stages, names)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def stage(self, name: str) -> StageConfig:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def check_spec(self, name: str) -> CheckSpec:
        return self.checks.get(name, CheckSpec())

    def check_environment(self) -> None:
        """Every credential the pipeline names is set: a ConfigError naming the first
        variable that is not. Called before any actor starts."""
        check_environment(self.catalog.auth, "catalog.auth")
        from driver_review.catalog.adapter import load_factory  # imports the catalog client

        load_factory(self.catalog.adapter)  # importable here, so in every actor too
        used = {name for stage in self.stages for name in stage.checks}
        for name in sorted(used):
            check_environment(self.check_spec(name).auth, f"checks.{name}.auth")

    def with_overrides(self, **sections: dict) -> PipelineConfig:
        """A copy with some fields of some sections replaced, validated again."""
        data = self.model_dump()
        for section, values in sections.items():
            data[section] = {**data[section], **values}
        return parse_config(data, source="overrides")


def parse_config(data: object, *, source: str = "config") -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(one_line(exc, where=source)) from None


def load_config(path: str | Path | None = None) -> PipelineConfig:
    """Load and validate a pipeline file; ``None`` loads the shipped default."""
    p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}: not valid YAML{at}") from None
    return parse_config(data, source=str(p))
