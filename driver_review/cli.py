"""``driver-review``: parse, build settings, call. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from driver_review.commands import CommandUnavailable, installed
from driver_review.config import DEFAULT_INSTANCE
from driver_review.errors import DriverReviewError
from driver_review.identifiers import instance_problem


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog-url", required=True, help="base URL of the vendor catalog")
    p.add_argument("--config", help="pipeline file (default: the shipped pipeline)")
    p.add_argument("--data-dir", default="./data", help="local path or pyarrow.fs URI")


def positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value

    return parse


def instance_name(text: str) -> str:
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
    add_pipeline_args(sweep)
    sweep.add_argument("--json", action="store_true", help="print a JSON summary last")
    sweep.add_argument("--timeout-s", type=positive(float), default=3600.0)
    sweep.add_argument(
        "--instance", type=instance_name, help="actor name prefix (default: sweep-<random>)"
    )

    probe = sub.add_parser("probe", help="a bounded, read-only first contact with a vendor")
    probe.add_argument("--catalog-url", required=True, help="base URL of the vendor catalog")
    probe.add_argument("--config", help="pipeline file (catalog.auth, checks)")
    probe.add_argument("--check", metavar="NAME", help="also POST one driver to this check")
    probe.add_argument("--json", action="store_true", help="print JSON instead of a table")

    status = sub.add_parser("status", help="state of a running instance")
    status.add_argument("--config", help="pipeline file the instance runs with")
    status.add_argument("--instance", type=instance_name, default=DEFAULT_INSTANCE)
    status.add_argument("--json", action="store_true", help="print JSON")

    report = sub.add_parser("report", help="summarise the Parquet results")
    report.add_argument("--data-dir", default="./data", help="local path or pyarrow.fs URI")
    report.add_argument("--json", action="store_true", help="print JSON")

    explain = sub.add_parser("explain", help="every decision about one driver, and why")
    explain.add_argument("driver_id", metavar="DRIVER_ID")
    explain.add_argument("--data-dir", default="./data", help="local path or pyarrow.fs URI")
    explain.add_argument(
        "--admin-url",
        default="http://127.0.0.1:8001",
        help="admin endpoint of a running service, for the ledger entry "
        "(token from DRIVER_REVIEW_ADMIN_TOKEN)",
    )
    explain.add_argument(
        "--offline", action="store_true", help="read the Parquet results only; ask no service"
    )
    explain.add_argument("--json", action="store_true", help="print JSON")

    for command in installed():  # serve, demo, bench: from the packages above the library
        command.add_arguments(sub.add_parser(command.name, help=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except (DriverReviewError, CommandUnavailable) as exc:
        print(f"driver-review: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def load_pipeline(args: argparse.Namespace):  # -> PipelineConfig
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
            load_pipeline(args),
            SweepOptions(data_dir=args.data_dir, instance=args.instance, timeout_s=args.timeout_s),
        )
        print("\n".join(summary_lines(summary)))
        if not summary["ok"]:
            print(failure_line(summary), file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(summary, sort_keys=True))
        return 0 if summary["ok"] else 1
    if args.command == "probe":
        from driver_review.probe import broken_lines, format_report, run_probe

        report = run_probe(load_pipeline(args), check=args.check)
        print(
            json.dumps(report.as_dict(), sort_keys=True)
            if args.json
            else "\n".join(format_report(report)),
            flush=True,
        )
        for line in broken_lines(report):
            print(line, file=sys.stderr)
        return 0 if report.ok else 1
    if args.command == "status":
        from driver_review.config import load_config
        from driver_review.status import format_status, read_status

        state = read_status(load_config(args.config), args.instance)
        print(json.dumps(state, sort_keys=True) if args.json else "\n".join(format_status(state)))
        return 0 if state["ok"] else 1
    if args.command == "report":
        from driver_review.report import build_report, report_lines

        result = build_report(args.data_dir)
        if args.json:
            print(json.dumps(result, sort_keys=True))
        else:
            print("\n".join(report_lines(result)))
        return 0
    if args.command == "explain":
        from driver_review.explain_cli import run_explain

        return run_explain(
            args.driver_id,
            data_dir=args.data_dir,
            admin_url=None if args.offline else args.admin_url,
            as_json=args.json,
        )
    for command in installed():
        if command.name == args.command:
            return command.run(args)
    raise AssertionError(args.command)
