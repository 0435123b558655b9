"""Settings of the simulated catalog: one pydantic model, validated once at construction.

A wrong value raises :class:`~driver_review.errors.ConfigError` with a one-line message
naming the field (``sim setting rate_limit: Input should be greater than 0``).
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)

from driver_review import env
from driver_review.errors import ConfigError, first_error
from driver_review.sim.limiters import WINDOWED
from driver_review.webhooks import decode_secret

Share = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0)]
AuthMode = Literal["none", "bearer", "oauth2"]
#: Where the simulator's own secrets come from (never flags: they would show in `ps`).
ENV = {
    "auth_token": env.SIM_TOKEN,
    "client_id": env.SIM_CLIENT_ID,
    "client_secret": env.SIM_CLIENT_SECRET,
}


class SimSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0 = an ephemeral port
    drivers: Annotated[int, Field(ge=1, le=2_000_000)] = 1000
    seed: int = 0
    rate_limit: Annotated[float, Field(gt=0)] | None = None  # requests/s over all /v1 routes
    rate_burst: Annotated[int, Field(ge=1)] | None = None  # default max(1, ceil(rate/5))
    # How long a window shape counts (rate_limit * rate_window_s per window); default 1 s.
    rate_window_s: Annotated[float, Field(gt=0, le=86_400)] | None = None
    # The shape of that limit (see driver_review.sim.limiters); only "token" has headers.
    limiter: Literal[
        "token", "leaky", "leaky-burst", "leaky-delay", "fixed", "sliding", "sliding-log", "haproxy"
    ] = "token"
    retry_after_format: Literal["seconds", "http-date"] = "seconds"
    ratelimit_headers: bool = False  # IETF RateLimit / RateLimit-Policy on /v1 responses
    latency_ms: NonNegative = 0.0
    latency_jitter_ms: NonNegative | None = None  # default latency_ms / 4
    fault_rate: Share = 0.0
    fault_timeout_s: Annotated[float, Field(gt=0)] = 15.0  # how long a "timeout" fault hangs
    update_rate: NonNegative = 0.0  # generated changes per second
    burst_every_s: Annotated[float, Field(gt=0)] | None = None
    burst_size: Annotated[int, Field(ge=1)] = 50
    webhook_url: str | None = None
    webhook_secret: str | None = None  # whsec_...
    webhook_drop_rate: Share = 0.0
    fat_pings: bool = False
    thin_pings: bool = False  # data holds only the id (the receiver looks the driver up)
    package_size: Annotated[int, Field(ge=1, le=256 * 1024 * 1024)] = 16384  # bytes
    # Share of listing and changes rows rendered bad (see driver_review.sim.badrows).
    bad_rows: Share = 0.0
    # Authentication of /v1 (see driver_review.sim.auth). Secrets come from the environment
    # (names in ENV) unless given here; SecretStr keeps them out of every repr.
    auth: AuthMode = "none"
    checks_auth: AuthMode | None = None  # the checks port's; default: auth
    auth_token: SecretStr | None = None
    client_id: SecretStr | None = None
    client_secret: SecretStr | None = None
    token_ttl_s: Annotated[float, Field(gt=0)] = 300.0
    # A second port serving only POST /v1/checks/{check}, with limits of its own.
    checks_port: Annotated[int, Field(ge=0, le=65535)] | None = None  # 0 = ephemeral
    checks_rate_limit: Annotated[float, Field(gt=0)] | None = None
    checks_rate_burst: Annotated[int, Field(ge=1)] | None = None  # default ceil(rate/5)
    checks_quota: Annotated[int, Field(ge=1)] | None = None  # requests per quota window
    checks_quota_window_s: Annotated[float, Field(gt=0)] = 86_400.0

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SettingError.from_validation(exc) from None

    @model_validator(mode="before")
    @classmethod
    def _secrets_from_env(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        modes = {data.get("auth", "none"), data.get("checks_auth") or data.get("auth", "none")}
        wanted = {"bearer": ["auth_token"], "oauth2": ["client_id", "client_secret"]}
        data = dict(data)
        for mode in sorted(modes & wanted.keys()):
            for name in wanted[mode]:
                if data.get(name) is None:
                    value = os.environ.get(ENV[name], "").strip()
                    if not value:
                        raise ValueError(f"auth: {mode} needs environment variable {ENV[name]}")
                    data[name] = value
        return data

    @model_validator(mode="after")
    def _checks_port(self) -> Self:
        if self.checks_port is None:
            given = [
                name
                for name in (
                    "checks_rate_limit",
                    "checks_rate_burst",
                    "checks_quota",
                    "checks_auth",
                )
                if getattr(self, name) is not None
            ]
            if given:
                raise ValueError(f"{given[0]}: needs checks_port")
        return self

    @model_validator(mode="after")
    def _limiter(self) -> Self:
        if self.limiter != "token" and self.ratelimit_headers:
            raise ValueError(f"ratelimit_headers: only with limiter token, not {self.limiter}")
        if self.rate_window_s is not None and self.limiter not in WINDOWED:
            raise ValueError(
                f"rate_window_s: only with a window limiter ({', '.join(WINDOWED)}), "
                f"not {self.limiter}"
            )
        return self

    @property
    def checks_burst(self) -> int:
        if self.checks_rate_burst is not None:
            return self.checks_rate_burst
        return max(1, math.ceil((self.checks_rate_limit or 1.0) / 5))

    @model_validator(mode="after")
    def _webhooks(self) -> Self:
        if self.webhook_url is not None:
            if not self.webhook_url.startswith(("http://", "https://")):
                raise ValueError("webhook_url: must be an http:// or https:// URL")
            if not self.webhook_secret:
                raise ValueError("webhook_secret: required with webhook_url")
        if self.fat_pings and self.thin_pings:
            raise ValueError("fat_pings and thin_pings: choose one")
        if self.webhook_secret is not None:
            try:
                decode_secret(self.webhook_secret)
            except ConfigError as exc:
                detail = str(exc).removeprefix("webhook secret: ")
                raise ValueError(f"webhook_secret: {detail}") from None
        return self

    @property
    def burst(self) -> int:
        """Token-bucket capacity in effect (only meaningful with a rate limit)."""
        if self.rate_burst is not None:
            return self.rate_burst
        return max(1, math.ceil((self.rate_limit or 1.0) / 5))

    @property
    def jitter_ms(self) -> float:
        return self.latency_ms / 4 if self.latency_jitter_ms is None else self.latency_jitter_ms


class SettingError(ConfigError):
    """A wrong sim setting; ``field`` names it, so a CLI can name its flag instead."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"sim setting {field}: {problem}")
        self.field = field
        self.problem = problem

    @classmethod
    def from_validation(cls, exc: ValidationError) -> SettingError:
        first = first_error(exc, top="")
        # A flag's user wants the problem, not pydantic's class of it.
        problem = first.message.removeprefix("Value error, ")
        field = first.path
        if not field and ": " in problem:
            # A model-level check names its field at the start of its message.
            field, problem = problem.split(": ", 1)
        return cls(field or "(settings)", problem)
