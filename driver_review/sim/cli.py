"""Flags of ``driver-review sim``: ``add_arguments`` declares them, ``settings_from_args``
turns the parsed namespace into validated :class:`SimSettings` (a wrong value raises
:class:`~driver_review.errors.ConfigError` naming the flag)."""

from __future__ import annotations

import argparse

from driver_review.errors import ConfigError
from driver_review.sim.limiters import SHAPES
from driver_review.sim.settings import SettingError, SimSettings

#: flag dest -> settings field (the same name unless listed).
_FIELD = {"burst_every": "burst_every_s"}
_FLAG = {
    **{f: "--" + f.replace("_", "-") for f in SimSettings.model_fields},
    "burst_every_s": "--burst-every",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = SimSettings.model_fields
    add = parser.add_argument
    add("--host", default=d["host"].default, help="address to listen on (default %(default)s)")
    add("--port", type=int, default=8080, help="port; 0 picks a free one (default %(default)s)")
    add("--drivers", type=int, default=d["drivers"].default, help="initial catalog size")
    add("--seed", type=int, default=d["seed"].default, help="seed of data, fates and faults")
    add("--rate-limit", type=float, help="requests/s over all /v1 routes (default: none)")
    add("--rate-burst", type=int, help="token-bucket capacity (default: ceil(rate/5))")
    add(
        "--limiter",
        choices=list(SHAPES),
        default="token",
        help="shape of the rate limit: token bucket, nginx leaky bucket (no burst, burst "
        "nodelay, burst with delay), fixed or sliding window, HAProxy stick table "
        "(default %(default)s)",
    )
    add(
        "--rate-window-s",
        type=float,
        help="how long a window limiter counts: R*S requests per S seconds (default 1)",
    )
    add("--retry-after-format", choices=["seconds", "http-date"], default="seconds")
    add("--ratelimit-headers", action="store_true", help="send IETF RateLimit headers")
    add("--latency-ms", type=float, default=0.0, help="added latency per /v1 request")
    add("--latency-jitter-ms", type=float, help="its spread (default: latency/4)")
    add("--fault-rate", type=float, default=0.0, help="share of /v1 requests that fail (0..1)")
    add("--fault-timeout-s", type=float, default=15.0, help="how long a timeout fault hangs")
    add("--update-rate", type=float, default=0.0, help="generated changes per second")
    add("--burst-every", type=float, metavar="S", help="a burst of changes every S seconds")
    add("--burst-size", type=int, default=50, metavar="K", help="changes per burst")
    add("--webhook-url", help="POST a signed ping for every generated change here")
    add("--webhook-secret", help="whsec_… secret to sign pings with")
    add("--webhook-drop-rate", type=float, default=0.0, help="share of pings never sent")
    add("--fat-pings", action="store_true", help="pings carry the whole driver record")
    add("--thin-pings", action="store_true", help="pings carry only the driver's id")
    add(
        "--bad-rows",
        type=float,
        default=0.0,
        metavar="F",
        help="share of listing/changes rows rendered bad (0..1); the truth is unchanged",
    )
    add("--package-size", type=int, default=16384, metavar="BYTES", help="bytes per package")
    auth = ["none", "bearer", "oauth2"]
    add(
        "--auth",
        choices=auth,
        default="none",
        help="bearer: token from DRIVER_REVIEW_SIM_TOKEN; oauth2: POST /oauth/token with "
        "DRIVER_REVIEW_SIM_CLIENT_ID/_SECRET",
    )
    add("--token-ttl-s", type=float, default=300.0, help="lifetime of an oauth2 token")
    add(
        "--checks-port",
        type=int,
        metavar="P",
        help="also serve POST /v1/checks/{check} on port P, with limits of its own",
    )
    add("--checks-auth", choices=auth, help="the checks port's auth (default: --auth)")
    add("--checks-rate-limit", type=float, metavar="R", help="requests/s on the checks port")
    add("--checks-rate-burst", type=int, help="its bucket (default: ceil(rate/5))")
    add("--checks-quota", type=int, metavar="N", help="requests per quota window (checks port)")
    add(
        "--checks-quota-window-s",
        type=float,
        default=86_400.0,
        metavar="W",
        help="the quota window (default: a day)",
    )


def settings_from_args(ns: argparse.Namespace) -> SimSettings:
    data = {}
    for dest, value in vars(ns).items():
        field = _FIELD.get(dest, dest)
        if field in SimSettings.model_fields and value is not None:
            data[field] = value
    try:
        return SimSettings(**data)
    except SettingError as exc:
        flag = _FLAG.get(exc.field, exc.field)
        raise ConfigError(f"sim: {flag}: {exc.problem}") from None
