"""``driver-review serve`` and ``driver-review demo``: the commands that start the Serve
app, contributed to the library's CLI through the ``driver_review.commands`` entry point
group (the library never imports this package). Heavy imports wait for ``run``."""

from __future__ import annotations

import argparse

from driver_review import env
from driver_review.cli import add_pipeline_args, instance_name, load_pipeline, positive
from driver_review.commands import Command
from driver_review.config import DEFAULT_INSTANCE
from serve_app import defaults


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    add_pipeline_args(serve)
    serve.add_argument("--host", default=defaults.HOST)
    serve.add_argument("--port", type=positive(int), default=defaults.PORT)
    serve.add_argument(
        "--instance", type=instance_name, default=DEFAULT_INSTANCE, help="actor name prefix"
    )
    serve.add_argument(
        "--migrate-stage",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="drivers the snapshot has at removed stage OLD are reviewed again at stage NEW "
        "(repeatable; adds to window.migrate_stages of the pipeline file)",
    )
    serve.add_argument(
        "--admin-host",
        default=defaults.ADMIN_HOST,
        help=f"admin endpoint (status, drivers); beyond loopback it needs {env.ADMIN_TOKEN}",
    )
    serve.add_argument("--admin-port", type=positive(int), default=defaults.ADMIN_PORT)
    # Not HAProxy by default, though it accepts several times the pings/s: Ray's HAProxy
    # template binds its stats page and Prometheus exporter on all interfaces, and nothing
    # else of this service listens beyond loopback unless asked to.
    serve.add_argument(
        "--proxy",
        choices=("auto", "haproxy", "default"),
        default="default",
        help="what fronts the webhook port: Serve's own proxy (default), "
        "Serve's HAProxy ingress (faster; its stats and metrics ports "
        "listen on all interfaces), or auto (HAProxy when found)",
    )


def _serve(args: argparse.Namespace) -> int:
    from serve_app.service import run_service

    return run_service(
        load_pipeline(args),
        config_path=args.config,
        instance=args.instance,
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        admin_host=args.admin_host,
        admin_port=args.admin_port,
        proxy=args.proxy,
    )


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--duration", type=positive(float), default=60.0, help="seconds")
    demo.add_argument("--drivers", type=positive(int), default=2000)
    demo.add_argument("--data-dir", default="./data/demo")


def _demo(args: argparse.Namespace) -> int:
    from serve_app.demo import run_demo

    return run_demo(duration_s=args.duration, drivers=args.drivers, data_dir=args.data_dir)


SERVE = Command(
    "serve", "the always-on service (webhooks, poller, pools)", _serve_arguments, _serve
)
DEMO = Command("demo", "see it work on this machine, in one command", _demo_arguments, _demo)
