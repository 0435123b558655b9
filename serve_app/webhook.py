"""What the ingress does with one webhook request before it reaches the orchestrator:
read the body under a size cap, verify the Standard Webhooks signature, parse and validate
the ping, and turn it into a :class:`~driver_review.ledger.Change`.

Pure logic (no Serve, no Ray): every refusal is a :class:`Refused` carrying the HTTP
status and a one-line detail; nothing else escapes, whatever the headers and body hold.
A refusal of a body that was well signed also carries a ``kind`` (why its data cannot be
taken): the ingress counts those as quarantined.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from driver_review.catalog.models import DriverRecord, WebhookPing
from driver_review.errors import ConfigError, Refused, SignatureError, first_error
from driver_review.identifiers import id_problem, time_problem, version_problem
from driver_review.ledger import Change
from driver_review.webhooks import Verified, Verifier
from driver_review.wire import stage_index, status_of

#: Why a well-signed ping's data cannot be taken (``quarantined`` counts by these).
QUARANTINE_KINDS = ("not_json", "shape", "id", "version", "stage", "time", "record")
# A pydantic error at data.<field> is a problem of that kind; anywhere else, of the shape.
_KIND_OF_FIELD = {
    "id": "id",
    "version": "version",
    "stage": "stage",
    "updated_at": "time",
    "record": "record",
}


@dataclass(frozen=True, slots=True)
class Ping:
    """A verified, validated ping, ready for intake; a thin one (``change`` None) names
    only its driver, which the ingress looks up before intake."""

    msg_id: str
    change: Change | None
    record: DriverRecord | None  # set for a fat ping: it fills the cache, no fetch needed
    driver_id: str = ""


class RedactedSecret:
    """The secret value(s) forwarded from the process that built the app: kept out of
    reprs and logs, which may print deployment init arguments."""

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "RedactedSecret(***)"


def split_secrets(value: str) -> list[str]:
    """Several secrets while keys rotate, separated by spaces and/or commas."""
    return [part for part in re.split(r"[\s,]+", value.strip()) if part]


def load_verifier(
    env_name: str,
    forwarded: RedactedSecret | None,
    tolerance_s: float,
    environ: Mapping[str, str] = os.environ,
) -> Verifier:
    """A :class:`Verifier` for the secret(s) in ``env_name``.

    The value the app builder saw wins: whoever deploys sets the variable where they run
    ``serve run``/``driver-review serve``, which is not always where replicas run (a
    remote cluster). Without it, the replica's own environment (``serve deploy`` builds
    the app on the cluster, so both are the same there). Errors name the variable only.
    """
    raw = forwarded.reveal() if forwarded is not None else environ.get(env_name, "")
    secrets = split_secrets(raw)
    if not secrets:
        raise ConfigError(
            f"webhook secret: environment variable {env_name} is not set or empty "
            "(set it where the app is built or on every node of the cluster)"
        )
    try:
        return Verifier(secrets, tolerance_s=tolerance_s)
    except ConfigError as exc:
        # decode_secret's message never contains the secret; say which variable it was.
        raise ConfigError(f"{env_name}: {exc}") from None


async def read_body(
    headers: Mapping[str, str], chunks: AsyncIterator[bytes], max_bytes: int
) -> bytes:
    """The body, refused with 413 above ``max_bytes`` — by the announced Content-Length
    before reading anything, and by the bytes actually read (a sender can lie or chunk)."""
    declared = headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise Refused(400, "content-length is not an integer") from None
        if length > max_bytes:
            raise Refused(413, f"body of {length} bytes is over the {max_bytes} byte limit")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise Refused(413, f"body is over the {max_bytes} byte limit")
        parts.append(chunk)
    return b"".join(parts)


def verify(verifier: Verifier, headers: Mapping[str, str], body: bytes) -> Verified:
    """The id and timestamp of a correctly signed, timely message; else 401 saying which."""
    try:
        return verifier.verify_message(headers, body)
    except SignatureError as exc:
        raise Refused(401, f"webhook signature: {exc}") from None


def _kind(loc: Sequence[object]) -> str:
    if len(loc) >= 2 and loc[0] == "data":
        return _KIND_OF_FIELD.get(str(loc[1]), "shape")
    return "shape"


def parse_ping(
    msg_id: str, body: bytes, stages: Sequence[str], *, now: float | None = None
) -> Ping:
    """Validate the body as a :class:`WebhookPing` (400 not JSON, 422 wrong shape or data
    that cannot be taken: an id or version that is not one, an unknown stage, a time
    before 1970 or beyond the skew allowance). Nothing is ever shortened to fit."""
    try:
        ping = WebhookPing.model_validate_json(body)
    except ValidationError as exc:
        if any(err["type"] == "json_invalid" for err in exc.errors(include_url=False)):
            raise Refused(400, "body is not valid JSON", "not_json") from None
        first = first_error(exc)
        raise Refused(422, str(first), _kind(first.loc)) from None
    data = ping.data
    if (problem := id_problem(data.id)) is not None:
        raise Refused(422, f"data.id: {problem}", "id")
    record = data.record
    if record is not None:
        # A fat ping: the record says it all; the ping's own fields, if given, must agree.
        if record.id != data.id or (data.version is not None and record.version != data.version):
            raise Refused(
                422, "data.record: id or version differs from data.id/data.version", "record"
            )
        summary: object = record
    elif data.thin:
        # Only the id (or part of a summary): the ingress looks the driver up.
        return Ping(msg_id, None, None, data.id)
    else:
        summary = data
    return Ping(msg_id, _change(summary, stages, now), record, data.id)


def _change(summary: object, stages: Sequence[str], now: float | None) -> Change:
    """The change a ping's summary (or fat record) says, or a 422 naming what is wrong."""
    version: str = summary.version  # type: ignore[attr-defined]
    if (problem := version_problem(version)) is not None:
        raise Refused(422, f"data.version: {problem}", "version")
    updated_at = summary.updated_at.timestamp()  # type: ignore[attr-defined]
    current = time.time() if now is None else now
    if (problem := time_problem(updated_at, current)) is not None:
        raise Refused(422, f"data.updated_at: {problem}", "time")
    try:  # the model cannot know the stages: the pipeline's list says which exist
        stage = stage_index(stages, summary.stage)  # type: ignore[attr-defined]
    except ValueError as exc:
        raise Refused(422, f"data.stage: {exc}", "stage") from None
    return Change(
        summary.id,  # type: ignore[attr-defined]
        version,
        stage,
        status_of(summary.status),  # type: ignore[attr-defined]
        updated_at,
    )
