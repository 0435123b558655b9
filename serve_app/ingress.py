"""The Serve deployment: the webhook edge of one driver-review instance.

The public port serves ``POST /webhooks/drivers`` and ``GET /healthz`` only (no OpenAPI
route either; the schema is published as ``deploy/openapi/webhooks.json``). Operator
routes live on the admin endpoint (``serve_app/admin.py``), which reads this replica's
counters through its deployment handle (``stats``).

Per request: size cap → signature → shape → dedupe → group intake. Accepted pings of
concurrent requests share one ``orchestrator.intake`` call (:class:`~serve_app.batcher.
GroupIntake`: the next call leaves as soon as the last returned, holding all that arrived
meanwhile), and each request is answered 202 only once that call returned: a replica dying
before then fails the request, and the sender retries it. A full intake refuses the whole
batch (429 with ``Retry-After``), so nothing answered 429 was taken.

No ``from __future__ import annotations`` here: FastAPI reads the route signatures.
"""

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from driver_review.backlog import Lane
from driver_review.config import PipelineConfig
from driver_review.errors import IntakeFull
from driver_review.identifiers import shown
from driver_review.ledger import Change
from driver_review.quarantine import BadRow, to_change
from driver_review.runtime.system import System
from driver_review.webhooks import Verified
from serve_app.batcher import GroupIntake
from serve_app.counters import IngressCounters
from serve_app.dedupe import SeenIds
from serve_app.openapi import HEALTHZ_RESPONSES, WEBHOOK_OPENAPI_EXTRA, WEBHOOK_RESPONSES
from serve_app.webhook import (
    Ping,
    RedactedSecret,
    Refused,
    load_verifier,
    parse_ping,
    read_body,
    verify,
)

if TYPE_CHECKING:
    from serve_app.app import IngressArgs

DEPLOYMENT_NAME = "DriverReviewIngress"
WEBHOOK_ROUTE = "/webhooks/drivers"

log = logging.getLogger("ray.serve")

api = FastAPI(title="driver-review webhook edge", docs_url=None, redoc_url=None, openapi_url=None)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """The answer to one request of a micro-batch."""

    status: int
    counter: str
    retry_after_s: float | None = None
    detail: str = ""

    def response(self) -> JSONResponse:
        if self.status == 202:
            return JSONResponse({"status": "accepted"}, status_code=202)
        headers = {}
        if self.retry_after_s is not None:
            # Retry-After takes whole seconds; round up so the sender never comes early.
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after_s)))
        return JSONResponse({"detail": self.detail}, status_code=self.status, headers=headers)


_ACCEPTED = _Outcome(202, "accepted")


def _retry_after_s(full: BaseException) -> float:
    # Ray re-raises the actor's IntakeFull as a subclass carrying the cause's attributes;
    # fall back to the cause, then to 1 s, should that ever change.
    delay = getattr(full, "retry_after_s", None)
    if delay is None:
        delay = getattr(getattr(full, "cause", None), "retry_after_s", 1.0)
    return float(delay) if delay is not None else 1.0


def _replica_id() -> Any:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # outside a replica (unit use)
        return None


# Helpers the class uses are defined above it: Serve serialises the ingress class by
# value when it is decorated, capturing only the module names that exist by then.
@serve.deployment(name=DEPLOYMENT_NAME)
@serve.ingress(api)
class DriverReviewIngress:
    def __init__(
        self, args: "IngressArgs", config: PipelineConfig, secret: RedactedSecret | None = None
    ) -> None:
        # A missing or malformed secret fails the replica here, with one line naming the
        # variable (never its value), so the deployment never serves unverified.
        self.verifier = load_verifier(args.webhook_secret_env, secret, args.tolerance_s)
        self.args = args
        self.stages = config.stage_names
        self.system = System.attach(config, args.instance)
        for ref in self.system.all_refs():
            # Bounded: a sender gives up after a few seconds; better a 503 it retries.
            ref.timeout_s = args.call_timeout_s
        self.seen = SeenIds(max_size=args.dedupe_size)
        # Ids of quarantined messages already logged and counted: a sender retries a 422.
        self.quarantine_seen = SeenIds(max_size=args.dedupe_size)
        self._inflight: dict[str, asyncio.Future[bool]] = {}
        self.counters = IngressCounters(args.instance)
        self._intake: GroupIntake[Ping, _Outcome] = GroupIntake(
            self._intake_batch,
            max_size=args.batch_max,
            max_in_flight=args.batch_in_flight,
            linger_s=args.batch_wait_s,
        )

    # -- webhook --------------------------------------------------------------------------
    @api.post(
        WEBHOOK_ROUTE,
        status_code=202,
        responses=WEBHOOK_RESPONSES,
        openapi_extra=WEBHOOK_OPENAPI_EXTRA,
    )
    async def webhook(self, request: Request) -> JSONResponse:
        verified: Verified | None = None
        try:
            body = await read_body(request.headers, request.stream(), self.args.max_body_bytes)
            verified = verify(self.verifier, request.headers, body)
            ping = parse_ping(verified.msg_id, body, self.stages)
        except Refused as refused:
            self.counters.count(f"refused_{refused.status}")
            if refused.kind is not None and verified is not None:
                self._quarantine(verified, refused)
            return JSONResponse({"detail": refused.detail}, status_code=refused.status)
        return await self._take(ping, verified.timestamp + self.verifier.tolerance_s)

    def _quarantine(self, verified: Verified, refused: Refused) -> None:
        """A well-signed ping whose data cannot be taken: counted and logged once per id
        (the sender retries it), the id shown safely; the poller sees the row later."""
        if verified.msg_id in self.quarantine_seen:
            return
        self.quarantine_seen.add(verified.msg_id, verified.timestamp + self.verifier.tolerance_s)
        self.counters.quarantine(refused.kind or "shape")
        log.warning(
            "webhook %s quarantined (%s): %s", shown(verified.msg_id), refused.kind, refused.detail
        )

    async def _take(self, ping: Ping, remember_until: float) -> JSONResponse:
        msg_id = ping.msg_id
        # A sender's retry racing its own first attempt waits for that attempt's outcome
        # instead of being enqueued beside it.
        while (pending := self._inflight.get(msg_id)) is not None:
            await asyncio.shield(pending)
        if msg_id in self.seen:
            self.counters.count("duplicate")
            return JSONResponse({"status": "duplicate"}, status_code=200)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._inflight[msg_id] = done
        accepted = False
        try:
            outcome = await self._intake(ping)
            accepted = outcome.status == 202
            if accepted:
                self.seen.add(msg_id, remember_until)
        finally:
            del self._inflight[msg_id]
            done.set_result(accepted)
        self.counters.count(outcome.counter)
        return outcome.response()

    async def _intake_batch(self, pings: list[Ping]) -> list[_Outcome]:
        n = len(pings)
        self.counters.batch(n)
        records = [p.record for p in pings if p.record is not None]
        if records:
            try:
                await asyncio.wait_for(self.system.cache.fill(records), self.args.call_timeout_s)
            except Exception as exc:  # only an optimisation: the worker fetches instead
                log.warning(
                    "cache fill of %d fat pings failed: %s", len(records), type(exc).__name__
                )
        outcomes: list[_Outcome | None] = [None] * n
        changes: dict[int, Change] = {}
        bad: list[BadRow] = []
        thin = [i for i, p in enumerate(pings) if p.change is None]
        if thin:
            await self._resolve(pings, thin, changes, bad, outcomes)
        changes.update({i: p.change for i, p in enumerate(pings) if p.change is not None})
        held = [changes[i] for i in range(n) if outcomes[i] is None and i in changes]
        try:
            await asyncio.wait_for(
                self.system.orchestrator.intake(held, Lane.FRESH),
                self.args.call_timeout_s,
            )
            if bad:
                await asyncio.wait_for(
                    self.system.orchestrator.quarantine(bad), self.args.call_timeout_s
                )
        except IntakeFull as full:
            out = _Outcome(429, "intake_full", _retry_after_s(full), "intake is full")
            return [o or out for o in outcomes]
        except Exception as exc:
            # Timed out or unreachable: maybe taken, maybe not. Say "later"; a retry is
            # harmless because the orchestrator ignores news it already has.
            log.warning("intake of %d pings failed: %s: %s", n, type(exc).__name__, exc)
            out = _Outcome(503, "unavailable", self.args.retry_after_s, "orchestrator unavailable")
            return [o or out for o in outcomes]
        return [o or _ACCEPTED for o in outcomes]

    async def _resolve(
        self,
        pings: list[Ping],
        thin: list[int],
        changes: dict[int, Change],
        bad: list[BadRow],
        outcomes: list["_Outcome | None"],
    ) -> None:
        """Look thin pings' drivers up (through the cache: a conditional GET, paced, single
        flight) so that the change is held, and reviewed, before the 202 is sent. A driver
        the catalog no longer has needs nothing; one it cannot answer for now is a 503 the
        sender retries (the next poll would find the change too)."""
        ids = [pings[i].driver_id for i in thin]
        try:
            found = await asyncio.wait_for(self.system.cache.lookup(ids), self.args.call_timeout_s)
        except Exception as exc:
            log.warning("looking up %d thin pings failed: %s", len(ids), type(exc).__name__)
            found = [(None, type(exc).__name__)] * len(ids)
        now = time.time()
        for i, (record, error) in zip(thin, found, strict=True):
            if record is None and error == "NotFound":
                continue  # accepted: nothing to review
            if record is None:
                outcomes[i] = _Outcome(
                    503,
                    "lookup_failed",
                    self.args.retry_after_s,
                    f"catalog lookup failed ({error})",
                )
                continue
            item = to_change(self.stages, record, now=now, source="ping")
            if isinstance(item, BadRow):
                bad.append(item)  # the catalog's record is bad: set aside, ping taken
            else:
                changes[i] = item
        self.counters.looked_up(len(thin))

    # -- health, and counters for the admin endpoint ------------------------------------
    @api.get("/healthz", responses=HEALTHZ_RESPONSES)
    async def healthz(self) -> JSONResponse:
        try:
            await asyncio.wait_for(self.system.orchestrator.ping(), self.args.status_timeout_s)
        except Exception as exc:
            return JSONResponse(
                {"status": "unavailable", "detail": f"orchestrator: {type(exc).__name__}"}, 503
            )
        return JSONResponse({"status": "ok"})

    async def stats(self) -> dict[str, Any]:
        """This replica's counters (a handle method, not a route: the admin endpoint's
        ``/status`` shows them under ``ingress``)."""
        return {
            **self.counters.snapshot(),
            "replica": _replica_id(),
            "dedupe_entries": len(self.seen),
            "in_flight": len(self._inflight),
            # Pings waiting for a free intake call, and the calls out now.
            "intake_waiting": self._intake.waiting,
            "intake_calls": self._intake.in_flight,
        }
