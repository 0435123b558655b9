"""Loading the pipeline file: the default loads, and every kind of wrong file gives one
ConfigError line that names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver_review.checks import build_stage_checks
from driver_review.config import DEFAULT_CONFIG_PATH, load_config
from driver_review.errors import ConfigError

GOOD = """\
stages:
  - name: intake
    checks: [metadata_complete, version_increases]
    pool: {min_workers: 1, max_workers: 2}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        build_stage_checks(load_config(path))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_default_config_loads_and_every_check_resolves() -> None:
    config = load_config()
    assert config == load_config(DEFAULT_CONFIG_PATH)
    assert config.stage_names == ["intake", "security", "compatibility"]
    stages = build_stage_checks(config)
    assert {s: [c.name for c in checks] for s, checks in stages.items()} == {
        "intake": ["metadata_complete", "hardware_ids_valid", "version_increases"],
        "security": ["package_digest", "malware_scan"],
        "compatibility": ["crash_telemetry", "hwid_conflicts"],
    }
    assert config.stage("security").pool.max_workers == 4


def test_a_small_file_gets_defaults_for_the_rest(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert config.window.bucket_s == 300
    assert list(build_stage_checks(config)) == ["intake"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "windw: {bucket_s: 60}\n", "windw: Extra inputs are not permitted"),
        (GOOD + "window: {bucket: 60}\n", "window.bucket: Extra inputs are not permitted"),
        (GOOD + "window: {bucket_s: soon}\n", "window.bucket_s: Input should be a valid number"),
        (GOOD + "window: {bucket_s: -1}\n", "window.bucket_s: Input should be greater than 0"),
        (
            GOOD.replace("min_workers: 1", "min_workers: 3"),
            "stages.0.pool: Value error, min_workers must be <= max_workers",
        ),
        (GOOD + "  - name: intake\n    checks: [malware_scan]\n", "stage names repeat"),
        (
            GOOD.replace("version_increases", "metadata_complete"),
            "stages.0.checks: Value error, check 'metadata_complete' is listed twice",
        ),
        (
            GOOD.replace("checks: [metadata_complete, version_increases]", "checks: []"),
            "stages.0.checks: List should have at least 1 item",
        ),
        ("window: {bucket_s: 60}\n", "stages: Field required"),
        ("- just\n- a list\n", "expected a mapping at the top level"),
        (
            GOOD + "checks: {scan: {kind: python}}\n",
            "checks.scan: Value error, a python check needs target: 'module:callable'",
        ),
        (
            GOOD + "checks: {scan: {kind: http}}\n",
            "checks.scan: Value error, an http check needs url",
        ),
        (
            GOOD + "checks: {scan: {url: 'http://x'}}\n",
            "checks.scan: Value error, target/url given but kind is builtin",
        ),
        (GOOD + "checks: {scan: {kind: grpc}}\n", "checks.scan.kind: Input should be"),
    ],
)
def test_a_wrong_file_names_the_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    message = config_error(path)
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "window: {bucket_s: [60\n")
    assert config_error(path) == f"{path}: not valid YAML at line 6"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert config_error(path) == f"{path}: cannot read: No such file or directory"


def test_an_unknown_check_in_a_stage_is_caught_at_load(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD.replace("version_increases", "version_incr")))
    with pytest.raises(ConfigError) as info:
        build_stage_checks(config)
    assert str(info.value).startswith(
        "stage 'intake': unknown check 'version_incr': not a builtin (metadata_complete, "
    )


def test_an_unknown_option_of_a_builtin_is_caught_at_load(tmp_path: Path) -> None:
    text = GOOD + "checks: {version_increases: {options: {strict: true}}}\n"
    message = config_error(write(tmp_path, text))
    assert message == (
        "stage 'intake': checks.version_increases.options: unknown option 'strict' (accepted: none)"
    )


def test_the_remote_name_option_of_an_external_check_is_accepted(tmp_path: Path) -> None:
    text = GOOD.replace("version_increases", "malware_scan")
    text += "checks: {malware_scan: {options: {check: av_scan}, timeout_s: 30}}\n"
    (check,) = [
        c
        for c in build_stage_checks(load_config(write(tmp_path, text)))["intake"]
        if c.name == "malware_scan"
    ]
    assert check.options == {"check": "av_scan"}
    assert check.timeout_s == 30
