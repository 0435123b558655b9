"""The checks of the default pipeline, the registry that builds them, and the stage runner.

Everything runs on plain asyncio with an in-memory catalog; the ``http`` kind talks to a
real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from driver_review.catalog.models import DriverRecord
from driver_review.checks import (
    BUILTINS,
    CheckContext,
    NamedCheck,
    Outcome,
    build_check,
    build_stage_checks,
    context_factory,
    run_stage,
)
from driver_review.config import CheckSpec, load_config, parse_config
from driver_review.errors import (
    ConfigError,
    MalformedResponse,
    RateLimited,
    ServerError,
    TransportError,
)
from tests.support.fakes import PACKAGE, FakeCatalog, make_driver

T = TypeVar("T")


def run(aw: Awaitable[T]) -> T:
    async def main() -> T:
        return await aw

    return asyncio.run(main())


def ctx_for(catalog: FakeCatalog, **kw: Any) -> CheckContext:
    return CheckContext(catalog=catalog, **kw)  # type: ignore[arg-type]


def check_one(
    name: str, driver: DriverRecord, catalog: FakeCatalog | None = None, **kw: Any
) -> Outcome:
    return run(BUILTINS[name].run(driver, ctx_for(catalog or FakeCatalog(), **kw)))


def stage(
    driver: DriverRecord, checks: list[NamedCheck], catalog: FakeCatalog | None = None, **kw: Any
) -> Any:
    factory = context_factory(catalog or FakeCatalog(), **kw)  # type: ignore[arg-type]
    return run(run_stage(driver, checks, factory))


def fn_check(name: str, fn: Callable[..., Awaitable[Outcome]], **kw: Any) -> NamedCheck:
    return NamedCheck(name, fn, **kw)


# --- intake: local rules ---------------------------------------------------------------


def test_metadata_complete_passes_on_a_full_record() -> None:
    assert check_one("metadata_complete", make_driver()).passed


def test_metadata_complete_names_every_blank_field() -> None:
    out = check_one("metadata_complete", make_driver(name="  ", vendor_id="", hardware_ids=[]))
    assert not out.passed
    assert out.reason == "missing or blank: name, vendor_id, hardware_ids"


def test_metadata_complete_counts_blank_hardware_ids_as_none() -> None:
    assert not check_one("metadata_complete", make_driver(hardware_ids=[" "])).passed


@pytest.mark.parametrize(
    "hwid",
    [
        "PCI\\VEN_8086&DEV_1533",
        "PCI\\VEN_10de&DEV_2684",
        "pci\\ven_10DE&dev_2684",
        "PCI\\VEN_8086&DEV_1533&SUBSYS_0000103C",
        "PCI\\VEN_8086&DEV_1533&REV_03",
        "PCI\\VEN_8086&DEV_1533&SUBSYS_0000103C&REV_03",
    ],
)
def test_hardware_ids_valid_accepts(hwid: str) -> None:
    assert check_one("hardware_ids_valid", make_driver(hardware_ids=[hwid])).passed


@pytest.mark.parametrize(
    "hwid",
    [
        "USB\\VID_046D&PID_C52B",
        "PCI\\VEN_8086&DEV_153",
        "PCI\\VEN_808G&DEV_1533",
        "PCI\\VEN_8086&DEV_1533&REV_03&SUBSYS_0000103C",
        "PCI\\VEN_8086&DEV_1533&SUBSYS_0000103",
        "PCI\\VEN_8086&DEV_1533 ",
        "PCI/VEN_8086&DEV_1533",
    ],
)
def test_hardware_ids_valid_rejects(hwid: str) -> None:
    out = check_one(
        "hardware_ids_valid", make_driver(hardware_ids=["PCI\\VEN_8086&DEV_1533", hwid])
    )
    assert not out.passed
    assert repr(hwid) in out.reason
    assert out.details["invalid"] == [hwid]


@pytest.mark.parametrize(
    ("version", "previous", "passed"),
    [
        ("2.1.10", "2.1.9", True),  # integers, not strings: 10 > 9
        ("3", "2.9.9", True),
        ("1.2.0", "1.2", True),
        ("1.0", None, True),
        ("2.1.9", "2.1.9", False),
        ("2.1.8", "2.1.9", False),
        ("2.1.9", "2.1.10", False),
        ("2.1.beta", "2.1.9", False),
        ("2..1", None, False),
        ("", None, False),
        ("2.1.10", "v2", False),
    ],
)
def test_version_increases(version: str, previous: str | None, passed: bool) -> None:
    out = check_one("version_increases", make_driver(version=version, previous_version=previous))
    assert out.passed is passed
    assert bool(out.reason) is not passed


# --- security: package digest through run_cpu ---------------------------------------


def test_package_digest_hashes_through_run_cpu() -> None:
    calls: list[str] = []

    async def recording_run_cpu(fn: Callable[..., Any], *args: Any) -> Any:
        calls.append(fn.__name__)
        return await asyncio.to_thread(fn, *args)

    out = check_one("package_digest", make_driver(), run_cpu=recording_run_cpu)
    assert out.passed
    assert calls == ["_sha256_hex"]
    assert out.details["sha256"] == hashlib.sha256(PACKAGE).hexdigest()


def test_package_digest_fails_on_a_different_digest() -> None:
    catalog = FakeCatalog()
    catalog.packages["drv-1"] = PACKAGE[:-1] + b"!"
    out = check_one("package_digest", make_driver(), catalog)
    assert not out.passed
    assert "sha256" in out.reason


def test_package_digest_fails_on_a_different_size_without_hashing() -> None:
    catalog = FakeCatalog()
    catalog.packages["drv-1"] = PACKAGE + b"x"

    async def no_cpu(fn: Callable[..., Any], *args: Any) -> Any:
        raise AssertionError("size mismatch must not need a hash")

    out = check_one("package_digest", make_driver(), catalog, run_cpu=no_cpu)
    assert not out.passed
    assert f"{len(PACKAGE) + 1} bytes" in out.reason


def test_package_digest_cannot_answer_without_a_package() -> None:
    catalog = FakeCatalog()
    catalog.packages.clear()
    result = stage(make_driver(), [build_check("package_digest", CheckSpec())], catalog)
    assert result.verdict == "error"
    assert result.reasons == {"package_digest": "no package for drv-1"}


# --- external checks through the catalog --------------------------------------------


def test_crash_telemetry_passes_details_through() -> None:
    catalog = FakeCatalog()
    catalog.answers["crash_telemetry"] = {
        "passed": False,
        "reason": "crash rate 2.5% > 1%",
        "details": {"crash_rate": 0.025},
    }
    out = check_one("crash_telemetry", make_driver(), catalog)
    assert out == Outcome(False, "crash rate 2.5% > 1%", {"crash_rate": 0.025})
    assert catalog.calls == [("crash_telemetry", "drv-1", "2.1.10")]


@pytest.mark.parametrize("name", ["malware_scan", "hwid_conflicts"])
def test_external_checks_ask_the_catalog_by_name(name: str) -> None:
    catalog = FakeCatalog()
    assert check_one(name, make_driver(), catalog).passed
    catalog.answers[name] = {"passed": False, "reason": "found something"}
    assert check_one(name, make_driver(), catalog) == Outcome(False, "found something")
    assert [c[0] for c in catalog.calls] == [name, name]


def test_external_check_remote_name_is_an_option() -> None:
    catalog = FakeCatalog()
    spec = CheckSpec(options={"check": "av_scan"})
    result = stage(make_driver(), [build_check("malware_scan", spec)], catalog)
    assert result.verdict == "approved"
    assert catalog.calls == [("av_scan", "drv-1", "2.1.10")]


def test_an_answer_about_another_version_is_an_error_not_a_verdict() -> None:
    catalog = FakeCatalog()
    catalog.answers["malware_scan"] = {"passed": True, "version": "1.0"}
    result = stage(make_driver(), [build_check("malware_scan", CheckSpec())], catalog)
    assert result.verdict == "error"
    assert "asked for drv-1@2.1.10" in result.reasons["malware_scan"]


# --- the stage runner: verdicts, errors versus failures -----------------------------


def test_default_stages_approve_a_good_driver() -> None:
    stages = build_stage_checks(load_config())
    for name, checks in stages.items():
        result = stage(make_driver(), checks)
        assert result.verdict == "approved", name
        assert result.reasons == {}
        assert all(c.status == "passed" and c.duration_s >= 0 for c in result.checks)


def test_malformed_catalog_response_gives_error_never_a_verdict() -> None:
    catalog = FakeCatalog()
    catalog.answers["hwid_conflicts"] = MalformedResponse("body is not JSON")
    result = stage(make_driver(), build_stage_checks(load_config())["compatibility"], catalog)
    assert result.verdict == "error"
    assert result.reasons == {"hwid_conflicts": "body is not JSON"}
    assert result.by_name("hwid_conflicts").error_type == "MalformedResponse"
    assert result.by_name("crash_telemetry").status == "passed"


def test_a_failure_rejects_even_when_another_check_errors() -> None:
    catalog = FakeCatalog()
    catalog.answers["crash_telemetry"] = {"passed": False, "reason": "crashes"}
    catalog.answers["hwid_conflicts"] = ServerError("HTTP 503")
    result = stage(make_driver(), build_stage_checks(load_config())["compatibility"], catalog)
    assert result.verdict == "rejected"
    assert result.reasons == {"crash_telemetry": "crashes"}
    assert result.by_name("hwid_conflicts").status == "error"


def test_checks_run_concurrently_and_an_error_cancels_none() -> None:
    async def slow_pass(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        await asyncio.sleep(0.3)
        return Outcome.ok()

    async def quick_raise(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        raise KeyError("vendor")

    checks = [fn_check(f"slow{i}", slow_pass) for i in range(3)] + [fn_check("boom", quick_raise)]
    start = time.monotonic()
    result = stage(make_driver(), checks)
    assert time.monotonic() - start < 0.8
    assert [c.status for c in result.checks] == ["passed", "passed", "passed", "error"]
    assert result.reasons == {"boom": "KeyError: 'vendor'"}
    assert result.by_name("slow0").duration_s >= 0.25


def test_a_failed_outcome_without_reason_still_says_why() -> None:
    async def silent_fail(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        return Outcome(False)

    result = stage(make_driver(), [fn_check("quiet", silent_fail)])
    assert result.verdict == "rejected"
    assert result.reasons == {"quiet": "check failed"}


def test_a_check_over_its_time_bound_is_an_error() -> None:
    async def hang(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        await asyncio.sleep(10)
        return Outcome.ok()

    result = stage(make_driver(), [fn_check("hang", hang, timeout_s=0.05)])
    assert result.verdict == "error"
    assert result.reasons == {"hang": "timed out after 0.05s"}


def test_builtin_time_bound_applies_only_when_set_on_purpose() -> None:
    assert build_check("malware_scan", CheckSpec()).timeout_s is None
    assert build_check("malware_scan", CheckSpec(timeout_s=2)).timeout_s == 2
    catalog = FakeCatalog()
    catalog.delay_s = 1.0
    result = stage(make_driver(), [build_check("malware_scan", CheckSpec(timeout_s=0.05))], catalog)
    assert result.reasons == {"malware_scan": "timed out after 0.05s"}


def test_each_check_gets_its_own_options() -> None:
    seen: dict[str, Any] = {}

    async def record(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        seen[str(ctx.options["tag"])] = dict(ctx.options)
        return Outcome.ok()

    checks = [
        fn_check("a", record, options={"tag": "a"}),
        fn_check("b", record, options={"tag": "b", "x": 1}),
    ]
    stage(make_driver(), checks)
    assert seen == {"a": {"tag": "a"}, "b": {"tag": "b", "x": 1}}


# --- python-kind checks -------------------------------------------------------------


@pytest.fixture
def sample_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def python_check(name: str, target: str, **options: Any) -> NamedCheck:
    return build_check(name, CheckSpec(kind="python", target=target, options=options))


@pytest.mark.usefixtures("sample_checks")
def test_python_check_async_with_options() -> None:
    check = python_check("vendor", "sample_checks:vendor_allowed", vendors="8086,10de")
    assert stage(make_driver(), [check]).verdict == "approved"
    result = stage(make_driver(vendor_id="1002"), [check])
    assert result.reasons == {"vendor": "vendor 1002 is not allowed"}


@pytest.mark.usefixtures("sample_checks")
def test_python_check_sync_returning_bool_is_adapted() -> None:
    check = python_check("os", "sample_checks:has_os")
    assert stage(make_driver(os="windows"), [check]).verdict == "approved"
    assert stage(make_driver(), [check]).reasons == {"os": "check failed"}


@pytest.mark.usefixtures("sample_checks")
def test_python_check_callable_object() -> None:
    check = python_check("max_ids", "sample_checks:max_hardware_ids", max=1)
    assert stage(make_driver(), [check]).verdict == "approved"
    two = make_driver(hardware_ids=["PCI\\VEN_8086&DEV_1533", "PCI\\VEN_8086&DEV_1534"])
    assert stage(two, [check]).verdict == "rejected"


@pytest.mark.usefixtures("sample_checks")
def test_python_check_returning_garbage_is_an_error() -> None:
    result = stage(make_driver(), [python_check("num", "sample_checks:returns_number")])
    assert result.verdict == "error"
    assert result.reasons == {"num": "TypeError: check num returned int, expected Outcome or bool"}


@pytest.mark.usefixtures("sample_checks")
@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module_xyz:check", "cannot import 'no_such_module_xyz:check'"),
        ("sample_checks:missing", "'sample_checks:missing' does not exist"),
        ("sample_checks:NOT_CALLABLE", "'sample_checks:NOT_CALLABLE' is not callable"),
        ("sample_checks:takes_one_arg", "must accept (driver, ctx)"),
    ],
)
def test_python_check_bad_target_is_a_config_error(target: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        python_check("mine", target)
    assert message in str(info.value)
    assert str(info.value).startswith("check mine: ")


@pytest.mark.usefixtures("sample_checks")
def test_python_check_is_resolved_when_the_pipeline_loads() -> None:
    config = parse_config(
        {
            "stages": [{"name": "intake", "checks": ["metadata_complete", "vendor"]}],
            "checks": {"vendor": {"kind": "python", "target": "sample_checks:nope"}},
        }
    )
    with pytest.raises(ConfigError, match=r"^stage 'intake': check vendor: .*does not exist"):
        build_stage_checks(config)


# --- http-kind checks against a real server -----------------------------------------


class _Handler(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []  # noqa: RUF012 - shared on purpose: tests read it

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.received.append(body)
        routes: dict[str, tuple[int, bytes, dict[str, str]]] = {
            "/pass": (200, b'{"passed": true}', {}),
            "/fail": (200, b'{"passed": false, "reason": "unsigned"}', {}),
            "/string-bool": (200, b'{"passed": "false"}', {}),
            "/no-passed": (200, b'{"reason": "hm"}', {}),
            "/not-json": (200, b"<html>ok</html>", {}),
            "/busy": (429, b"", {"Retry-After": "7"}),
            "/broken": (503, b"", {}),
        }
        if self.path == "/slow":
            time.sleep(1.0)
            status, payload, headers = 200, b'{"passed": true}', {}
        else:
            status, payload, headers = routes[self.path]
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client gave up on /slow on purpose; its broken pipe is not news


@pytest.fixture(scope="module")
def decision_api() -> Iterator[str]:
    server = _QuietServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def http_check(url: str, timeout_s: float = 5.0, **spec: Any) -> NamedCheck:
    return build_check("api", CheckSpec(kind="http", url=url, timeout_s=timeout_s, **spec))


def test_http_check_posts_the_driver_and_reads_the_verdict(decision_api: str) -> None:
    _Handler.received.clear()
    assert stage(make_driver(), [http_check(f"{decision_api}/pass")]).verdict == "approved"
    assert _Handler.received == [{"driver_id": "drv-1", "version": "2.1.10"}]
    result = stage(make_driver(), [http_check(f"{decision_api}/fail")])
    assert (result.verdict, result.reasons) == ("rejected", {"api": "unsigned"})


def test_http_check_uses_the_shared_client(decision_api: str) -> None:
    async def go() -> Any:
        async with httpx.AsyncClient() as client:
            factory = context_factory(FakeCatalog(), http=client)  # type: ignore[arg-type]
            return await run_stage(make_driver(), [http_check(f"{decision_api}/fail")], factory)

    assert run(go()).verdict == "rejected"


@pytest.mark.parametrize(
    ("path", "error", "reason"),
    [
        ("/string-bool", MalformedResponse, "answer passed: Input should be a valid boolean"),
        ("/no-passed", MalformedResponse, "answer passed: Field required"),
        ("/not-json", MalformedResponse, "Invalid JSON"),
        ("/busy", RateLimited, "HTTP 429"),
        ("/broken", ServerError, "HTTP 503"),
        ("/slow", TransportError, "timed out after 0.2s"),
    ],
)
def test_http_check_bad_answers_are_errors(
    decision_api: str, path: str, error: type[Exception], reason: str
) -> None:
    # Only /slow is meant to time out; the others get room for a loaded machine. /busy asks
    # for 7 s, more than the wait budget: raised at once, to be retried later.
    check = http_check(
        f"{decision_api}{path}", timeout_s=0.2 if path == "/slow" else 5.0, max_wait_s=5.0
    )
    with pytest.raises(error) as info:
        run(check.run(make_driver(), ctx_for(FakeCatalog())))
    assert reason in str(info.value)
    if error is RateLimited:
        assert info.value.retry_after_s == 7.0  # type: ignore[attr-defined]
    result = stage(make_driver(), [check])
    assert result.verdict == "error"
    assert result.by_name("api").error_type == error.__name__


def test_http_check_unreachable_is_a_transport_error() -> None:
    result = stage(make_driver(), [http_check("http://127.0.0.1:9/x", timeout_s=1)])
    assert result.verdict == "error"
    assert result.by_name("api").error_type == "TransportError"
