"""The Serve webhook ingress on a real Serve and the session's real Ray.

Serve is started once for the module on a free port. One instance (``main``, at ``/``)
serves the request-level tests; the backpressure and end-to-end tests start an instance
and a Serve app (under a route prefix) of their own and stop them when done.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import ValidationError
from ray import serve

import serve_app
from driver_review.config import PipelineConfig, load_config, parse_config
from driver_review.errors import ConfigError
from driver_review.results import read_results
from driver_review.runtime.system import System, start_system, stop_system
from driver_review.sim import SimServer, SimSettings
from driver_review.sim.webhooks import ping_body
from driver_review.webhooks import signed_headers
from serve_app.app import IngressArgs, build_app
from serve_app.webhook import load_verifier
from tests.support.net import free_port
from tests.support.serve import shutdown_serve, start_serve
from tests.support.wait import wait_until

# Ray starts (once per session) through the serve_url fixture; the pure tests need none.
pytestmark = pytest.mark.ray

SLOW = "tests.integration.slow_checks:slow"
ROUTE = "/webhooks/drivers"
MAX_BODY = 64 * 1024


def _secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def _config(url: str, *, slow_s: float | None = None, **window: Any) -> PipelineConfig:
    data = load_config().model_dump()
    data["catalog"]["url"] = url
    data["window"].update(window)
    data["results"]["rollover_s"] = 1.0
    if slow_s is not None:  # every stage slow, one item at a time: the backlog stays full
        data["checks"]["slow"] = {"kind": "python", "target": SLOW, "options": {"delay_s": slow_s}}
        for stage in data["stages"]:
            stage["checks"].append("slow")
            stage["pool"].update(min_workers=1, max_workers=1, max_in_flight=1)
    return parse_config(data, source="test")


def _deploy(name: str, prefix: str, instance: str, secrets: list[str], **args: Any) -> None:
    """Build and run an app whose secret(s) reach the replicas only through the builder:
    the variable is unique and set in this process alone, after Ray started."""
    env = f"DR_TEST_SECRET_{uuid.uuid4().hex[:8].upper()}"
    os.environ[env] = ", ".join(secrets)
    try:
        app = build_app(IngressArgs(instance=instance, webhook_secret_env=env, **args))
    finally:
        del os.environ[env]
    serve.run(app, name=name, route_prefix=prefix)


@dataclass
class Edge:
    """One instance with its simulated catalog and the URL of its Serve app."""

    url: str
    system: System
    sim: SimServer
    secrets: list[str]
    data_dir: str

    def post(
        self,
        client: httpx.Client,
        body: bytes,
        *,
        secret: str | None = None,
        msg_id: str | None = None,
        **headers: str,
    ) -> httpx.Response:
        signed = signed_headers(secret or self.secrets[0], msg_id or _msg_id(), body)
        return client.post(
            self.url + ROUTE,
            content=body,
            headers={"content-type": "application/json", **signed, **headers},
        )

    def events(self) -> int:
        return self.system.orchestrator.call_sync("stats")["counters"]["events"]

    def ingress(self, client: httpx.Client | None = None) -> dict[str, Any]:
        return _ingress_stats("srv-main")


def _ingress_stats(app: str) -> dict[str, Any]:
    """One replica's counters, as the admin endpoint reads them (a handle call)."""
    return serve.get_app_handle(app).stats.remote().result(timeout_s=30)


def _msg_id() -> str:
    return "msg_" + uuid.uuid4().hex


def _in_review(sim: SimServer, skip: frozenset[str] | set[str] = frozenset()) -> str:
    return next(
        d for d, s in sim.state.current().items() if s["status"] == "in_review" and d not in skip
    )


def _decisions(sim: SimServer, driver_id: str, version: str) -> list[Any]:
    return [
        d for d in list(sim.state.decisions) if d.driver_id == driver_id and d.version == version
    ]


def _start(data_dir: str, config: PipelineConfig, name: str) -> System:
    instance = f"srv-{name}-{uuid.uuid4().hex[:6]}"
    return start_system(
        config, instance=instance, data_dir=data_dir, outer_loop=False, autoscale=False
    )


@pytest.fixture(scope="module")
def serve_url(ray_session: None) -> Iterator[str]:
    yield start_serve()
    shutdown_serve()


@pytest.fixture(scope="module")
def main(serve_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    sim = SimServer(SimSettings(drivers=60, seed=4)).start()
    data_dir = str(tmp_path_factory.mktemp("serve-main"))
    system = _start(data_dir, _config(sim.url), "main")
    secrets = [_secret(), _secret()]  # the second one exercises key rotation
    _deploy("srv-main", "/", system.instance, secrets, max_body_bytes=MAX_BODY)
    yield Edge(serve_url, system, sim, secrets, data_dir)
    serve.delete("srv-main")  # stop intake first, then drain and stop the pipeline
    asyncio.run(stop_system(system))
    sim.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


# -- accepted pings ------------------------------------------------------------------------
def test_thin_ping_is_accepted_held_and_reviewed(main: Edge, http: httpx.Client) -> None:
    assert http.get(main.url + "/healthz").json() == {"status": "ok"}
    driver_id = _in_review(main.sim)
    record = main.sim.state.record(driver_id)
    sent = time.time()
    response = main.post(http, ping_body(record, fat=False))
    assert response.status_code == 202, response.text
    assert response.json() == {"status": "accepted"}
    # 202 came after intake returned: the orchestrator holds it already.
    entry = main.system.orchestrator.call_sync("driver", driver_id)
    assert entry is not None and entry["version"] == record.version
    decided = wait_until(
        lambda: _decisions(main.sim, driver_id, record.version), 30, "a decision", every_s=0.1
    )
    print(f"\nthin ping: 202 to first decision {decided[0].at.timestamp() - sent:.3f}s")
    assert decided[0].stage == record.stage


def test_fat_ping_fills_the_cache_and_needs_no_fetch(main: Edge, http: httpx.Client) -> None:
    before = main.system.cache.call_sync("stats")
    reviewed = {d.driver_id for d in main.sim.state.decisions}
    driver_id = _in_review(main.sim, skip=reviewed)
    record = main.sim.state.record(driver_id)
    response = main.post(http, ping_body(record, fat=True))
    assert response.status_code == 202, response.text
    wait_until(
        lambda: _decisions(main.sim, driver_id, record.version), 30, "a decision", every_s=0.1
    )
    after = main.system.cache.call_sync("stats")
    assert after["fills"] == before["fills"] + 1
    assert main.sim.state.stats.fetches_by_version[(driver_id, record.version)] == 0


# -- refusals ------------------------------------------------------------------------------
def test_unverifiable_messages_are_refused_and_nothing_is_enqueued(
    main: Edge, http: httpx.Client
) -> None:
    record = main.sim.state.record(_in_review(main.sim))
    body = ping_body(record, fat=False)
    events = main.events()
    counted = main.ingress(http)

    bare = http.post(main.url + ROUTE, content=body)
    wrong = main.post(http, body, secret=_secret())
    signed = signed_headers(main.secrets[0], _msg_id(), body)
    tampered = http.post(
        main.url + ROUTE, content=body.replace(b"in_review", b"published"), headers=signed
    )
    old = signed_headers(main.secrets[0], _msg_id(), body, timestamp=int(time.time()) - 3600)
    expired = http.post(main.url + ROUTE, content=body, headers=old)
    details = {}
    for name, response in (
        ("bare", bare),
        ("wrong", wrong),
        ("tampered", tampered),
        ("expired", expired),
    ):
        assert response.status_code == 401, (name, response.text)
        details[name] = response.json()["detail"]
    assert "missing webhook-id" in details["bare"]
    assert "no valid v1 signature" in details["wrong"]
    assert details["tampered"] == details["wrong"]
    assert "outside the tolerance" in details["expired"]
    assert main.events() == events
    assert main.ingress(http)["refused"]["401"] == counted["refused"]["401"] + 4


def test_bad_bodies_get_413_400_422_naming_the_problem(main: Edge, http: httpx.Client) -> None:
    events = main.events()
    good = json.loads(ping_body(main.sim.state.record(_in_review(main.sim)), fat=False))

    def variant(**data: Any) -> bytes:
        return json.dumps({**good, "data": {**good["data"], **data}}).encode()

    too_big = main.post(http, b"{" + b" " * MAX_BODY + b"}")
    assert too_big.status_code == 413 and "byte limit" in too_big.json()["detail"]
    chunked = http.post(
        main.url + ROUTE,
        content=iter([b" " * 40_000] * 3),
        headers=signed_headers(main.secrets[0], _msg_id(), b""),
    )
    assert chunked.status_code == 413, "a body without Content-Length is capped as it is read"
    not_json = main.post(http, b'{"type": "driver.updated", ')
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["detail"]
    no_id = {**good, "data": {k: v for k, v in good["data"].items() if k != "id"}}
    for body, field in (
        (json.dumps(no_id).encode(), "data.id"),
        (variant(stage="nowhere"), "data.stage"),
        (variant(version="9" * 40), "data.version"),
        (variant(status="lost"), "data.status"),
        (b"[]", "(top level)"),
    ):
        response = main.post(http, body)
        assert response.status_code == 422, (field, response.text)
        assert response.json()["detail"].startswith(field), response.json()
    assert main.events() == events


def test_hostile_headers_get_4xx_never_5xx_and_nothing_is_kept(
    main: Edge, http: httpx.Client
) -> None:
    """What a user saw: a 400-digit timestamp and a non-ASCII signature got 500; a 10 KiB
    webhook-id was accepted and kept in the dedupe table."""
    body = ping_body(main.sim.state.record(_in_review(main.sim)), fat=False)
    events, before = main.events(), main.ingress()
    signed = signed_headers(main.secrets[0], _msg_id(), body)
    huge_id = "m" * 10 * 1024
    hostile = {
        "400-digit timestamp": {**signed, "webhook-timestamp": "9" * 400},
        "negative timestamp": {**signed, "webhook-timestamp": "-5"},
        "fractional timestamp": {**signed, "webhook-timestamp": signed["webhook-timestamp"] + ".5"},
        "non-ASCII signature": {**signed, "webhook-signature": "v1,\u00e9t\u00e9"},
        "non-base64 signature": {**signed, "webhook-signature": "v1,%%%%"},
        "10 KiB id, well signed": signed_headers(main.secrets[0], huge_id, body),
        "non-ASCII id, well signed": signed_headers(main.secrets[0], "msg\u00e9", body),
    }
    for name, headers in hostile.items():
        encoded = {k: v.encode("utf-8") for k, v in headers.items()}  # raw bytes on the wire
        response = http.post(
            main.url + ROUTE, content=body, headers={"content-type": "application/json", **encoded}
        )
        assert response.status_code == 401, (name, response.status_code, response.text[:200])
        detail = response.json()["detail"]
        assert "\n" not in detail and len(detail) < 200, (name, detail)
    assert main.events() == events
    after = main.ingress()
    assert after["dedupe_entries"] == before["dedupe_entries"]
    assert after["refused"]["401"] == before["refused"]["401"] + len(hostile)


def test_well_signed_pings_with_bad_data_are_quarantined_by_kind(
    main: Edge, http: httpx.Client
) -> None:
    good = json.loads(ping_body(main.sim.state.record(_in_review(main.sim)), fat=False))
    events, before = main.events(), main.ingress()["quarantined"]

    def variant(**data: Any) -> bytes:
        return json.dumps({**good, "data": {**good["data"], **data}}).encode()

    bad = {
        "id": variant(id=".."),
        "version": variant(version="1" * 33),
        "stage": variant(stage="legal_review"),
        "time": variant(updated_at="2999-01-01T00:00:00Z"),
    }
    field = {
        "id": "data.id",
        "version": "data.version",
        "stage": "data.stage",
        "time": "data.updated_at",
    }
    for kind, body in bad.items():
        msg_id = _msg_id()
        for _ in range(2):  # the sender's retry is refused again, counted once
            response = main.post(http, body, msg_id=msg_id)
            assert response.status_code == 422, (kind, response.text)
            assert response.json()["detail"].startswith(field[kind])
    assert main.events() == events
    after = main.ingress()["quarantined"]
    assert {k: after[k] - before[k] for k in bad} == dict.fromkeys(bad, 1), after


def test_rotated_key_is_accepted_and_a_replay_is_a_duplicate(
    main: Edge, http: httpx.Client
) -> None:
    record = main.sim.state.record(_in_review(main.sim))
    body = ping_body(record, fat=False)
    msg_id = _msg_id()
    events = main.events()
    first = main.post(http, body, secret=main.secrets[1], msg_id=msg_id)
    assert first.status_code == 202, first.text
    assert main.events() == events + 1
    for secret in main.secrets:  # the sender's retry: same id, signed afresh
        again = main.post(http, body, secret=secret, msg_id=msg_id)
        assert again.status_code == 200 and again.json() == {"status": "duplicate"}
    assert main.events() == events + 1


def test_public_port_serves_only_the_webhook_and_healthz(main: Edge, http: httpx.Client) -> None:
    """Operator routes moved to the admin endpoint; no schema route either."""
    driver_id = _in_review(main.sim)
    for path in ("/status", f"/drivers/{driver_id}", "/openapi.json", "/docs"):
        assert http.get(main.url + path).status_code == 404, path
    assert http.get(main.url + ROUTE).status_code == 405
    assert http.get(main.url + "/healthz").status_code == 200


def test_ingress_counters_by_handle(main: Edge, http: httpx.Client) -> None:
    before = main.ingress()
    body = ping_body(main.sim.state.record(_in_review(main.sim)), fat=False)
    msg_id = _msg_id()
    assert main.post(http, body, msg_id=msg_id).status_code == 202
    assert main.post(http, body, msg_id=msg_id).status_code == 200
    ingress = main.ingress()
    assert ingress["accepted"] == before["accepted"] + 1
    assert ingress["duplicates"] == before["duplicates"] + 1
    assert ingress["batches"] >= 1 and ingress["replica"]
    assert ingress["intake_waiting"] == 0 and ingress["intake_calls"] == 0  # at rest


def test_serve_config_file_and_builder_args() -> None:
    """What ``serve run serve_app/serve_config.yaml`` and ``serve run
    serve_app.app:build_app instance=main`` rely on, checked without deploying."""
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve.schema import ServeDeploySchema

    path = Path(serve_app.__file__).with_name("serve_config.yaml")
    deploy = ServeDeploySchema.model_validate(yaml.safe_load(path.read_text()))
    (app,) = deploy.applications
    assert app.import_path == "serve_app.app:build_app" and app.route_prefix == "/"
    IngressArgs.model_validate(app.args)
    # Serve validates CLI args (strings) into the builder's annotated model.
    built = call_user_app_builder_with_args_if_necessary(
        build_app, {"instance": "main", "batch_max": "64"}
    )
    assert isinstance(built, serve.Application)
    with pytest.raises(ValidationError, match="batch_max"):
        call_user_app_builder_with_args_if_necessary(build_app, {"batch_max": "0"})


def test_an_unreachable_orchestrator_gets_503_not_202(serve_url: str, http: httpx.Client) -> None:
    """An app for an instance that is not running: nothing can hold the event, so the
    sender is told to come back (503 + Retry-After), never 202."""
    secret = _secret()
    _deploy(
        "srv-ghost",
        "/ghost",
        f"ghost-{uuid.uuid4().hex[:6]}",
        [secret],
        call_timeout_s=1.0,
        status_timeout_s=0.5,
    )
    try:
        url = serve_url + "/ghost"
        assert http.get(url + "/healthz").status_code == 503
        body = (
            b'{"type": "driver.updated", "timestamp": "2026-01-01T00:00:00Z", "data": '
            b'{"id": "d1", "version": "1", "stage": "intake", "status": "in_review", '
            b'"updated_at": "2026-01-01T00:00:00Z"}}'
        )
        response = http.post(
            url + ROUTE, content=body, headers=signed_headers(secret, _msg_id(), body)
        )
        assert response.status_code == 503, response.text
        assert int(response.headers["retry-after"]) >= 1
    finally:
        serve.delete("srv-ghost")


def test_missing_secret_fails_the_replica_with_one_line_naming_the_variable(
    serve_url: str,
) -> None:
    env = f"DR_TEST_UNSET_{uuid.uuid4().hex[:8].upper()}"
    with pytest.raises(ConfigError, match=env) as err:
        load_verifier(env, None, 300.0, environ={})
    assert "\n" not in str(err.value)
    app = build_app(IngressArgs(instance="nobody", webhook_secret_env=env))
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="srv-nosecret failed"):
            serve.run(app, name="srv-nosecret", route_prefix="/nosecret")
        failed_s = time.monotonic() - started
        message = (
            serve.status().applications["srv-nosecret"].deployments["DriverReviewIngress"].message
        )
    finally:
        serve.delete("srv-nosecret")
    print(
        f"\nmissing secret: deployment failed after {failed_s:.1f}s: "
        f"{message.strip().splitlines()[-1]}"
    )
    assert f"ConfigError: webhook secret: environment variable {env} is not set" in message


# -- backpressure --------------------------------------------------------------------------
async def _burst(url: str, secret: str, bodies: dict[str, bytes]) -> dict[str, httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one(body: bytes) -> httpx.Response:
            return await client.post(
                url + ROUTE, content=body, headers=signed_headers(secret, _msg_id(), body)
            )

        answers = await asyncio.gather(*(one(b) for b in bodies.values()))
    return dict(zip(bodies, answers, strict=True))


@pytest.mark.timeout(180)
def test_burst_past_the_high_water_mark_gets_429_and_loses_nothing_accepted(
    serve_url: str, tmp_path: Any, http: httpx.Client
) -> None:
    sim = SimServer(SimSettings(drivers=200, seed=7)).start()
    system = _start(str(tmp_path), _config(sim.url, slow_s=2.0, high_water=5, batch_size=4), "bp")
    secret = _secret()
    try:
        # Small batches so a burst spans several intake calls; few requests in flight and
        # a short Serve queue, so Serve's own shedding (429 + Retry-After) can show too.
        _deploy(
            "srv-bp",
            "/bp",
            system.instance,
            [secret],
            batch_max=16,
            batch_wait_s=0.02,
            max_ongoing_requests=32,
            max_queued_requests=16,
            retry_after_s=2,
        )
        url = serve_url + "/bp"
        records = {d: sim.state.record(d) for d in list(sim.state.current())[:200]}
        bodies = {d: ping_body(r, fat=False) for d, r in records.items()}
        answers = asyncio.run(_burst(url, secret, bodies))
        codes = Counter(r.status_code for r in answers.values())
        assert set(codes) <= {202, 429}, codes
        refused = [r for r in answers.values() if r.status_code == 429]
        assert refused, f"no 429 in a burst of {len(bodies)}: {codes}"
        for r in refused:
            assert int(r.headers["retry-after"]) >= 1
        by_ingress = sum(1 for r in refused if _detail(r) == "intake is full")
        ingress = _ingress_stats("srv-bp")
        print(
            f"\nburst of {len(bodies)}: {dict(codes)}; 429 from intake {by_ingress}, "
            f"from Serve's queue limit {len(refused) - by_ingress}; ingress {ingress}"
        )
        assert ingress["intake_full"] == by_ingress >= 1
        assert ingress["batches"] < ingress["batched_events"], "no micro-batching happened"
        for driver_id, r in answers.items():
            if r.status_code == 202:  # accepted means held: in the ledger, newest version
                entry = system.orchestrator.call_sync("driver", driver_id)
                assert entry is not None, driver_id
                assert entry["version"] == records[driver_id].version
        counters = system.orchestrator.call_sync("stats")["counters"]
        assert counters["events"] == codes[202] and counters["refused"] >= by_ingress
    finally:
        serve.delete("srv-bp")
        asyncio.run(stop_system(system, drain_timeout_s=30))
        sim.stop()


def _detail(response: httpx.Response) -> str | None:
    try:
        return response.json().get("detail")
    except ValueError:
        return None  # Serve's own rejection is not our JSON


# -- end to end ------------------------------------------------------------------------------
def _percentiles(values: list[float]) -> str:
    if len(values) < 2:
        return f"n={len(values)} {values}"
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return (
        f"n={len(values)} p50 {statistics.median(values):.3f}s p99 {cuts[98]:.3f}s "
        f"max {max(values):.3f}s"
    )


@pytest.mark.timeout(180)
def test_simulator_pings_through_serve_get_reviewed(
    serve_url: str, tmp_path: Any, http: httpx.Client
) -> None:
    """The simulated catalog is the sender: signed pings with its retry policy."""
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    data_dir = str(tmp_path)
    system = _start(data_dir, _config(sim_url), "e2e")
    secret = _secret()
    sim = None
    try:
        _deploy("srv-e2e", "/e2e", system.instance, [secret])
        started = time.time()
        sim = SimServer(
            SimSettings(
                port=sim_port,
                drivers=50,
                seed=2,
                update_rate=5,
                webhook_url=serve_url + "/e2e" + ROUTE,
                webhook_secret=secret,
            )
        ).start()

        def sim_stats() -> dict[str, Any]:
            return http.get(sim_url + "/_sim/stats").json()

        wait_until(
            lambda: sim_stats()["webhooks"]["delivered"] >= 25, 30, "25 deliveries", every_s=0.25
        )
        http.post(sim_url + "/_sim/pause")  # the catalog holds still from here on
        wait_until(
            lambda: sim_stats()["webhooks_pending"] == 0, 30, "the sender to drain", every_s=0.1
        )
        changed = {}
        for driver_id in sim.state.current():
            record = sim.state.record(driver_id)
            if record.released_at is not None and record.released_at.timestamp() >= started:
                changed[driver_id] = record
        assert len(changed) >= 10, changed

        def undecided() -> list[str]:
            return [d for d, r in changed.items() if not _decisions(sim, d, r.version)]

        wait_until(lambda: not undecided(), 30, "every changed driver decided", every_s=0.25)
        hooks = sim_stats()["webhooks"]
        assert hooks["rejected"] == hooks["gave_up"] == 0, hooks

        # Acceptance to decision: the worker's result rows carry when the item entered
        # the backlog (inside the intake call the 202 waited for) and when it was decided.
        def first_rows() -> dict[str, dict[str, Any]]:
            rows = {}
            for row in read_results(data_dir).to_pylist():
                rec = changed.get(row["driver_id"])
                if rec is not None and row["version"] == rec.version and row["stage"] == "intake":
                    rows.setdefault(row["driver_id"], row)
            return rows

        rows = wait_until(
            lambda: len(first_rows()) == len(changed) and first_rows(),
            15,
            "result rows",
            every_s=0.5,
        )
        accept_to_decision = [
            (r["reviewed_at"] - r["queued_at"]).total_seconds() for r in rows.values()
        ]
        change_to_decision = [
            min(d.at for d in _decisions(sim, did, rec.version)).timestamp()
            - rec.released_at.timestamp()
            for did, rec in changed.items()
        ]
        print(f"\nend to end: {len(changed)} changed drivers, webhooks {hooks}")
        print(f"  ping accepted -> first decision: {_percentiles(accept_to_decision)}")
        print(f"  catalog change -> first decision: {_percentiles(change_to_decision)}")
        assert max(accept_to_decision) < 30
    finally:
        if sim is not None:
            sim.stop()
        serve.delete("srv-e2e")
        asyncio.run(stop_system(system))
