"""``driver-review explain``: the Parquet results of a driver, and its ledger entry from a
running service's admin endpoint (over HTTP, so explaining needs no Ray at all).

Exit codes: 0 explained; 1 nothing is known of the driver (or the results cannot be
read); 2 a bad driver id (as for every bad flag).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

import httpx

from driver_review.errors import ConfigError
from driver_review.explain import explain, format_explanation, known
from driver_review.identifiers import id_problem, redact_url

ADMIN_TIMEOUT_S = 3.0


def ledger_from_admin(admin_url: str, driver_id: str) -> tuple[dict[str, Any] | None, str]:
    """The orchestrator's entry for ``driver_id`` and a note on where it came from."""
    from driver_review.env import ADMIN_TOKEN as ADMIN_TOKEN_ENV

    token = os.environ.get(ADMIN_TOKEN_ENV, "").strip()
    headers = {"authorization": f"Bearer {token}"} if token else {}
    where = redact_url(admin_url)
    try:
        answer = httpx.get(
            f"{admin_url.rstrip('/')}/drivers/{driver_id}", headers=headers, timeout=ADMIN_TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        return None, f"no service answered at {where} ({type(exc).__name__}): Parquet only"
    if answer.status_code == 200:
        return answer.json(), f"from the service at {where}"
    if answer.status_code == 404:
        return None, f"not in the ledger of the service at {where}"
    if answer.status_code == 401:
        return None, f"the service at {where} wants {ADMIN_TOKEN_ENV}: Parquet only"
    return None, f"the service at {where} answered {answer.status_code}: Parquet only"


def run_explain(
    driver_id: str,
    *,
    data_dir: str,
    admin_url: str | None,
    as_json: bool,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    if (problem := id_problem(driver_id)) is not None:
        raise ConfigError(f"DRIVER_ID: {problem}")
    entry, note = (
        ledger_from_admin(admin_url, driver_id)
        if admin_url
        else (None, "no service asked (--offline)")
    )
    try:
        doc = explain(data_dir, driver_id, entry)
    except OSError as exc:  # pyarrow raises OSError subclasses for unreadable datasets
        print(
            f"driver-review: error: cannot read results under {data_dir}: {exc}".splitlines()[0],
            file=err,
        )
        return 1
    doc["service"] = note
    if not known(doc):
        print(
            f"driver-review: error: driver {driver_id!r} has no decisions under "
            f"{doc['data_dir']}; ledger: {note}",
            file=err,
        )
        return 1
    if as_json:
        print(json.dumps(doc, sort_keys=True), file=out)
    else:
        print("\n".join(format_explanation(doc, note)), file=out)
    return 0
