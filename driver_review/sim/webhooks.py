"""The catalog's webhook sender: Standard Webhooks v1 messages about generated changes.

A bounded queue feeds a few concurrent senders. Each message keeps its ``webhook-id``
across retries (receivers dedupe on it) and is signed afresh on every attempt (the
signature covers the attempt's timestamp). Failures and 5xx are retried with exponential
backoff and jitter; a 429 waits for its ``Retry-After`` (seconds or HTTP-date); other 4xx
are final; after ``max_attempts`` the message is given up. All of it is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from datetime import UTC, datetime

import httpx

from driver_review.catalog.models import DriverRecord, PingData, WebhookPing
from driver_review.retry import parse_retry_after
from driver_review.sim.stats import SimStats
from driver_review.webhooks import signed_headers

CONCURRENCY = 4
QUEUE_MAX = 10_000
MAX_ATTEMPTS = 8
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 10.0
RETRY_AFTER_MAX_S = 60.0  # a receiver asking for more is waited on for this long only
TIMEOUT_S = 5.0
#: 4xx answers that mean "later", not "never".
RETRYABLE_4XX = frozenset({408, 425, 429})


def ping_body(record: DriverRecord, *, fat: bool = False, thin: bool = False) -> bytes:
    """A ``driver.updated`` message: the driver's summary (the default), with the whole
    record under ``data.record`` (``fat``), or ``data`` holding only ``id`` (``thin``, as
    most senders send: the receiver looks the driver up)."""
    if thin:
        return json.dumps(
            {
                "type": "driver.updated",
                "timestamp": datetime.now(UTC).isoformat(),
                "data": {"id": record.id},
            }
        ).encode()
    ping = WebhookPing(
        type="driver.updated",
        timestamp=datetime.now(UTC),
        data=PingData(
            id=record.id,
            version=record.version,
            stage=record.stage,
            status=record.status,
            updated_at=record.updated_at,
            record=record if fat else None,
        ),
    )
    # A thin ping leaves ``record`` out rather than sending it as null.
    exclude = None if fat else {"data": {"record"}}
    return ping.model_dump_json(exclude=exclude).encode()


class WebhookSender:
    def __init__(
        self,
        *,
        url: str,
        secret: str,
        stats: SimStats,
        seed: int = 0,
        drop_rate: float = 0.0,
        fat: bool = False,
        thin: bool = False,
        concurrency: int = CONCURRENCY,
        queue_max: int = QUEUE_MAX,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.url = url
        self.secret = secret
        self.stats = stats
        self.drop_rate = drop_rate
        self.fat = fat
        self.thin = thin
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=queue_max)
        self._rng = random.Random(f"{seed}/webhooks")
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None
        self._in_flight = 0

    def start(self) -> None:
        """Start the senders on the running event loop."""
        self._client = httpx.AsyncClient(timeout=TIMEOUT_S)
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"sim-webhook-{i}")
            for i in range(self.concurrency)
        ]

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def pending(self) -> int:
        """Messages queued or being delivered."""
        return self._queue.qsize() + self._in_flight

    def offer(self, record: DriverRecord) -> bool:
        """Queue a ping about ``record`` without waiting; ``False`` if dropped or full."""
        if self.drop_rate > 0 and self._rng.random() < self.drop_rate:
            self.stats.webhooks["dropped"] += 1
            return False
        msg_id = "msg_" + uuid.uuid4().hex
        try:
            self._queue.put_nowait((msg_id, ping_body(record, fat=self.fat, thin=self.thin)))
        except asyncio.QueueFull:
            self.stats.webhooks["overflow"] += 1
            return False
        self.stats.webhooks["queued"] += 1
        return True

    async def _worker(self) -> None:
        while True:
            msg_id, body = await self._queue.get()
            self._in_flight += 1
            try:
                await self._deliver(msg_id, body)
            finally:
                self._in_flight -= 1
                self._queue.task_done()

    def _backoff_s(self, attempt: int) -> float:
        ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
        return ceiling * self._rng.uniform(0.5, 1.0)

    async def _deliver(self, msg_id: str, body: bytes) -> None:
        assert self._client is not None
        counts = self.stats.webhooks
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                counts["retried"] += 1
            headers = {
                "content-type": "application/json",
                **signed_headers(self.secret, msg_id, body),
            }
            counts["sent"] += 1
            try:
                response = await self._client.post(self.url, content=body, headers=headers)
            except httpx.HTTPError:
                delay = self._backoff_s(attempt)
            else:
                status = response.status_code
                if 200 <= status < 300:
                    counts["delivered"] += 1
                    return
                if 400 <= status < 500 and status not in RETRYABLE_4XX:
                    counts["rejected"] += 1
                    self.stats.webhook_rejections[str(status)] += 1
                    return
                hinted = None
                if status == 429:
                    counts["rate_limited"] += 1
                    hinted = parse_retry_after(
                        response.headers.get("retry-after"), time.time(), max_s=RETRY_AFTER_MAX_S
                    )
                delay = hinted if hinted is not None else self._backoff_s(attempt)
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
        counts["gave_up"] += 1
