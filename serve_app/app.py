"""The Serve application of driver-review: its typed arguments and its builder.

::

    serve run serve_app.app:build_app instance=main          # import path + args
    serve run serve_app/serve_config.yaml                    # or serve deploy …

The webhook secret is read from the environment variable ``webhook_secret_env`` (several
secrets separated by spaces or commas while keys rotate). The value seen by the process
that builds the app is handed to the replicas (kept out of reprs, never logged), so
``DRIVER_REVIEW_WEBHOOK_SECRET=whsec_… serve run …`` works against a remote cluster too;
without it, each replica reads the variable from its own environment.

No ``from __future__ import annotations`` here: Serve reads the builder's parameter
annotation as a class to validate the args with.
"""

import os
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from ray.serve import Application
from ray.serve.config import BackpressureConfig

from driver_review import env
from driver_review.config import load_config
from driver_review.identifiers import instance_problem
from driver_review.runtime.names import DEFAULT_INSTANCE
from serve_app.ingress import DriverReviewIngress
from serve_app.proxies import replica_env
from serve_app.webhook import RedactedSecret, load_verifier

SECRET_ENV = env.WEBHOOK_SECRET
MIB = 1024 * 1024


def _instance(value: str) -> str:
    problem = instance_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class IngressArgs(BaseModel):
    """Arguments of :func:`build_app` (``args:`` in a Serve config file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance: Annotated[str, AfterValidator(_instance)] = DEFAULT_INSTANCE
    #: The pipeline file the instance runs with (stage names); None for the shipped default.
    config: str | None = None
    webhook_secret_env: Annotated[str, Field(min_length=1)] = SECRET_ENV
    tolerance_s: Annotated[float, Field(gt=0)] = 300.0
    max_body_bytes: Annotated[int, Field(gt=0)] = MIB
    #: Pings per intake call at most.
    batch_max: Annotated[int, Field(gt=0)] = 256
    #: Intake calls one replica has in flight at once; pings arriving meanwhile wait for
    #: a free one and leave together (serve_app/batcher.py).
    batch_in_flight: Annotated[int, Field(gt=0)] = 1
    #: How long a batch may wait to fill before it leaves; 0: it leaves as soon as a call
    #: may (the load, not a timer, sizes the batches).
    batch_wait_s: Annotated[float, Field(ge=0)] = 0.0
    dedupe_size: Annotated[int, Field(gt=0)] = 100_000
    #: Requests one replica works on at once; None: (batch_in_flight + 1) * batch_max, so
    #: a full batch can wait while the others are in intake.
    max_ongoing_requests: Annotated[int, Field(gt=0)] | None = None
    #: Requests Serve queues per caller (proxy) beyond those; more are shed with 429.
    max_queued_requests: Annotated[int, Field(gt=0)] = 1000
    #: Retry-After of Serve's own shedding and of 503s (an intake refusal carries its own).
    retry_after_s: Annotated[float, Field(ge=0)] = 1.0
    #: Bound on a call to the orchestrator or cache while a request waits for it.
    call_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    #: Bound on the read-only routes (/healthz, /status, /drivers/{id}).
    status_timeout_s: Annotated[float, Field(gt=0)] = 2.0
    num_replicas: Annotated[int, Field(gt=0)] = 1
    #: The replicas serve HTTP themselves behind Serve's HAProxy ingress. Set by
    #: ``driver-review serve`` when it starts Serve with HAProxy (serve_app/proxies.py);
    #: with ``serve run``, set RAY_SERVE_ENABLE_HA_PROXY=1 in the cluster instead.
    haproxy: bool = False


def _runtime_env(args: IngressArgs) -> dict:
    env = replica_env(args.haproxy)
    return {"runtime_env": {"env_vars": env}} if env else {}


def build_app(args: IngressArgs) -> Application:
    """The ingress of instance ``args.instance`` as a Serve application."""
    config = load_config(args.config)  # validated once here, passed to every replica
    value = os.environ.get(args.webhook_secret_env, "").strip()
    forwarded = RedactedSecret(value) if value else None
    if forwarded is not None:
        load_verifier(args.webhook_secret_env, forwarded, args.tolerance_s)  # fail fast
    return DriverReviewIngress.options(  # type: ignore[attr-defined]  # @serve.deployment
        num_replicas=args.num_replicas,
        max_ongoing_requests=args.max_ongoing_requests
        or (args.batch_in_flight + 1) * args.batch_max,
        max_queued_requests=args.max_queued_requests,
        backpressure_config=BackpressureConfig(status_code=429, retry_after_s=args.retry_after_s),
        # I/O-bound: reserve no CPU, so a 2-core machine hosts it beside the pipeline.
        ray_actor_options={"num_cpus": 0, **_runtime_env(args)},
    ).bind(args, config, forwarded)
