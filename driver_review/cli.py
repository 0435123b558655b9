"""``driver-review``: parse, build settings, call. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from driver_review.config import DEFAULT_INSTANCE
from driver_review.errors import DriverReviewError
from driver_review.identifiers import instance_problem


def _add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog-url", required=True, help="base URL of the vendor catalog")
    p.add_argument("--config", help="pipeline file (default: the shipped pipeline)")
    p.add_argument("--data-dir", default="./data", help="local path or pyarrow.fs URI")


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value

    return parse


def _instance(text: str) -> str:
    problem = instance_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="driver-review",
        description="Continuous, rate-limit-aware review of hardware driver updates on Ray.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    from driver_review.sim.cli import add_arguments as add_sim_arguments

    sim = sub.add_parser("sim", help="run the simulated vendor catalog")
    add_sim_arguments(sim)

    sweep = sub.add_parser("sweep", help="one batch sweep to quiescence")
    _add_pipeline_args(sweep)
    sweep.add_argument("--json", action="store_true", help="print a JSON summary last")
    sweep.add_argument("--timeout-s", type=_positive(float), default=3600.0)
    sweep.add_argument("--instance", type=_instance,
                       help="actor name prefix (default: sweep-<random>)")

    serve = sub.add_parser("serve", help="the always-on service (webhooks, poller, pools)")
    _add_pipeline_args(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_positive(int), default=8000)
    serve.add_argument("--instance", type=_instance, default=DEFAULT_INSTANCE,
                       help="actor name prefix")
    serve.add_argument(
        "--migrate-stage", action="append", default=[], metavar="OLD=NEW",
        help="drivers the snapshot has at removed stage OLD are reviewed again at stage NEW "
             "(repeatable; adds to window.migrate_stages of the pipeline file)")
    serve.add_argument("--admin-host", default="127.0.0.1",
                       help="admin endpoint (status, drivers); beyond loopback it needs "
                            "DRIVER_REVIEW_ADMIN_TOKEN")
    serve.add_argument("--admin-port", type=_positive(int), default=8001)
    # Not HAProxy by default, though it accepts several times the pings/s: Ray's HAProxy
    # template binds its stats page and Prometheus exporter on all interfaces, and nothing
    # else of this service listens beyond loopback unless asked to.
    serve.add_argument("--proxy", choices=("auto", "haproxy", "default"), default="default",
                       help="what fronts the webhook port: Serve's own proxy (default), "
                            "Serve's HAProxy ingress (faster; its stats and metrics ports "
                            "listen on all interfaces), or auto (HAProxy when found)")

    probe = sub.add_parser("probe", help="a bounded, read-only first contact with a vendor")
    probe.add_argument("--catalog-url", required=True, help="base URL of the vendor catalog")
    probe.add_argument("--config", help="pipeline file (catalog.auth, checks)")
    probe.add_argument("--check", metavar="NAME", help="also POST one driver to this check")
    probe.add_argument("--json", action="store_true", help="print JSON instead of a table")

    status = sub.add_parser("status", help="state of a running instance")
    status.add_argument("--config", help="pipeline file the instance runs with")
    status.add_argument("--instance", type=_instance, default=DEFAULT_INSTANCE)
    status.add_argument("--json", action="store_true", help="print JSON")

    report = sub.add_parser("report", help="summarise the Parquet results")
    report.add_argument("--data-dir", default="./data", help="local path or pyarrow.fs URI")
    report.add_argument("--json", action="store_true", help="print JSON")

    explain = sub.add_parser("explain", help="every decision about one driver, and why")
    explain.add_argument("driver_id", metavar="DRIVER_ID")
    explain.add_argument("--data-dir", default="./data", help="local path or pyarrow.fs URI")
    explain.add_argument("--admin-url", default="http://127.0.0.1:8001",
                         help="admin endpoint of a running service, for the ledger entry "
                              "(token from DRIVER_REVIEW_ADMIN_TOKEN)")
    explain.add_argument("--offline", action="store_true",
                         help="read the Parquet results only; ask no service")
    explain.add_argument("--json", action="store_true", help="print JSON")

    demo = sub.add_parser("demo", help="see it work on this machine, in one command")
    demo.add_argument("--duration", type=_positive(float), default=60.0, help="seconds")
    demo.add_argument("--drivers", type=_positive(int), default=2000)
    demo.add_argument("--data-dir", default="./data/demo")

    bench = sub.add_parser("bench", help="the benchmark: every scenario side by side, here")
    bench.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    bench.add_argument("--out", default="bench-results", help="directory for bench.json/.png")
    bench.add_argument("--only", help="comma-separated scenarios (default: all)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except DriverReviewError as exc:
        print(f"driver-review: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _load(args: argparse.Namespace):  # -> PipelineConfig
    from driver_review.config import load_config

    config = load_config(args.config)
    overrides: dict[str, dict] = {"catalog": {"url": args.catalog_url}}
    if getattr(args, "migrate_stage", None):
        from driver_review.stage_names import parse_migration

        flags = dict(parse_migration(text) for text in args.migrate_stage)
        overrides["window"] = {"migrate_stages": {**config.window.migrate_stages, **flags}}
    config = config.with_overrides(**overrides)
    config.check_environment()  # a missing credential: one line naming it, before Ray starts
    return config


def _run(args: argparse.Namespace) -> int:
    if args.command == "sim":
        from driver_review.sim.cli import settings_from_args
        from driver_review.sim.server import serve_forever

        serve_forever(settings_from_args(args))
        return 0
    if args.command == "sweep":
        from driver_review.sweep import SweepOptions, failure_line, run_sweep, summary_lines

        summary = run_sweep(
            _load(args),
            SweepOptions(data_dir=args.data_dir, instance=args.instance, timeout_s=args.timeout_s),
        )
        print("\n".join(summary_lines(summary)))
        if not summary["ok"]:
            print(failure_line(summary), file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(summary, sort_keys=True))
        return 0 if summary["ok"] else 1
    if args.command == "serve":
        from driver_review.service import run_service

        return run_service(_load(args), config_path=args.config, instance=args.instance,
                           data_dir=args.data_dir, host=args.host, port=args.port,
                           admin_host=args.admin_host, admin_port=args.admin_port,
                           proxy=args.proxy)
    if args.command == "probe":
        from driver_review.probe import broken_lines, format_report, run_probe

        report = run_probe(_load(args), check=args.check)
        print(json.dumps(report.as_dict(), sort_keys=True) if args.json
              else "\n".join(format_report(report)), flush=True)
        for line in broken_lines(report):
            print(line, file=sys.stderr)
        return 0 if report.ok else 1
    if args.command == "status":
        from driver_review.config import load_config
        from driver_review.service import format_status, read_status

        state = read_status(load_config(args.config), args.instance)
        print(json.dumps(state, sort_keys=True) if args.json else "\n".join(format_status(state)))
        return 0 if state["ok"] else 1
    if args.command == "report":
        from driver_review.report import build_report, format_report

        result = build_report(args.data_dir)
        if args.json:
            print(json.dumps(result, sort_keys=True))
        else:
            print("\n".join(format_report(result)))
        return 0
    if args.command == "explain":
        from driver_review.explain_cli import run_explain

        return run_explain(args.driver_id, data_dir=args.data_dir,
                           admin_url=None if args.offline else args.admin_url,
                           as_json=args.json)
    if args.command == "demo":
        from driver_review.demo import run_demo

        return run_demo(duration_s=args.duration, drivers=args.drivers, data_dir=args.data_dir)
    if args.command == "bench":
        from driver_review.bench import run_bench

        return run_bench(quick=args.quick, out_dir=args.out, only=args.only)
    raise AssertionError(args.command)
