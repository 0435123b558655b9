"""The ceiling of scenario 5: the webhook route without Ray, in one uvicorn process.

It does what the Serve ingress does to a ping before handing it to the orchestrator —
read the body under the size cap, verify the Standard Webhooks signature
(:class:`~driver_review.webhooks.Verifier`), validate the body, dedupe by id — and answers
202. Run as ``python -m jobs.bench.plain_asgi --port P`` with the secret in
``DRIVER_REVIEW_WEBHOOK_SECRET``.
"""

from __future__ import annotations

import argparse
import os

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from driver_review.config import load_config
from serve_app.dedupe import SeenIds
from serve_app.service import SECRET_ENV
from serve_app.webhook import Refused, parse_ping, read_body, verify
from serve_app.webhook import load_verifier as _load_verifier

MAX_BODY_BYTES = 1024 * 1024


def build_app() -> FastAPI:
    verifier = _load_verifier(SECRET_ENV, None, 300.0, os.environ)
    stages = load_config().stage_names
    seen = SeenIds(max_size=100_000)
    app = FastAPI(docs_url=None, redoc_url=None)

    @app.post("/webhooks/drivers")
    async def webhook(request: Request) -> JSONResponse:
        try:
            body = await read_body(request.headers, request.stream(), MAX_BODY_BYTES)
            verified = verify(verifier, request.headers, body)
            parse_ping(verified.msg_id, body, stages)
        except Refused as refused:
            return JSONResponse({"detail": refused.detail}, status_code=refused.status)
        if verified.msg_id in seen:
            return JSONResponse({"status": "duplicate"}, status_code=200)
        seen.add(verified.msg_id, verified.timestamp + verifier.tolerance_s)
        return JSONResponse({"status": "accepted"}, status_code=202)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        build_app(), host="127.0.0.1", port=args.port, log_level="warning", access_log=False
    )


if __name__ == "__main__":
    main()
