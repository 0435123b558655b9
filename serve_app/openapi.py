"""The OpenAPI document of the public webhook edge, published as
``deploy/openapi/webhooks.json`` (the public port serves no schema route).

The webhook route reads its body as raw bytes (the signature covers the exact bytes), so
FastAPI cannot infer the body or the Standard Webhooks headers: they are declared here,
with every answer the route gives. ``python -m serve_app.openapi`` rewrites the file;
a test checks that it is current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from driver_review.catalog.models import WebhookPing

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "deploy" / "openapi" / "webhooks.json"
_REF = "#/components/schemas/{model}"


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_STATUS = {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
_DETAIL = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "whole seconds to wait before retrying",
        "schema": {"type": "string"},
    }
}


def _retry_later(description: str) -> dict[str, Any]:
    # Serve's own shedding (queue full) answers in plain text; ours in JSON.
    return {
        "description": description,
        "headers": _RETRY_AFTER,
        "content": {
            "application/json": {"schema": _DETAIL},
            "text/plain": {"schema": {"type": "string"}},
        },
    }


WEBHOOK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(_STATUS, "a message already accepted (same webhook-id): nothing new taken"),
    202: _json(_STATUS, "accepted: the orchestrator holds the change"),
    400: _json(_DETAIL, "body is not JSON, or content-length is not an integer"),
    401: _json(
        _DETAIL,
        "missing or malformed webhook headers, a timestamp outside the "
        "tolerance, or no valid signature",
    ),
    413: _json(_DETAIL, "body over the size limit"),
    422: _json(
        _DETAIL,
        "well signed, but the data cannot be taken (shape, id, version, "
        "stage or time); counted as quarantined",
    ),
    429: _retry_later("intake or Serve's queue is full: retry after Retry-After"),
    503: _retry_later("the orchestrator is unreachable: retry after Retry-After"),
}

HEALTHZ_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(_STATUS, "the orchestrator answers"),
    503: {
        "description": "the orchestrator does not answer in time",
        "content": {
            "application/json": {
                "schema": _DETAIL
                | {"properties": {"status": {"type": "string"}, "detail": {"type": "string"}}}
            },
            "text/plain": {"schema": {"type": "string"}},
        },
    },
}


def _header(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _ping_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    schema = WebhookPing.model_json_schema(ref_template=_REF)
    defs = schema.pop("$defs", {})
    return schema, defs


_PING, _PING_DEFS = _ping_schema()

WEBHOOK_OPENAPI_EXTRA: dict[str, Any] = {
    "parameters": [
        _header(
            "webhook-id", "message id, printable ASCII, at most 256 characters; a retry keeps it"
        ),
        _header("webhook-timestamp", "Unix seconds (ASCII digits), within the tolerance"),
        _header(
            "webhook-signature",
            "space-separated 'v1,<base64 HMAC-SHA256>' entries over '{id}.{timestamp}.{body}'",
        ),
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": _REF.format(model=WebhookPing.__name__)}}
        },
    },
}


def webhook_openapi() -> dict[str, Any]:
    """The document, generated from the ingress app."""
    from serve_app.ingress import api

    doc = api.openapi()
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_PING_DEFS)
    schemas[WebhookPing.__name__] = _PING
    return doc


def render() -> str:
    return json.dumps(webhook_openapi(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m serve_app.openapi [--check]``: write the file, or check it is current."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is out of date: run python -m serve_app.openapi", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
