"""``deploy/grafana/driver-review.json`` queries only series the service exports.

The exported metrics are read from their definitions (``runtime/metrics.py`` and the
ingress's ``serve_app/counters.py``) with ``ast``, so no Ray is needed. In Prometheus a
metric carries Ray's ``ray_`` prefix; a counter gets ``_total``; a histogram
``_bucket``/``_sum``/``_count``; the metric's own ``instance`` tag shows as
``exported_instance`` (Prometheus keeps ``instance`` for the scraped node).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "driver-review.json"
DEFINITIONS = [
    ROOT / "driver_review" / "runtime" / "metrics.py",
    ROOT / "serve_app" / "counters.py",
]
SUFFIXES = {"Gauge": ("",), "Counter": ("_total",), "Histogram": ("_bucket", "_sum", "_count")}
#: Labels Ray and Prometheus add to every series.
ADDED_LABELS = {"SessionName", "instance", "exported_instance", "job", "le"}


def exported() -> dict[str, set[str]]:
    """Prometheus series name -> the labels it has, for every metric defined."""
    series: dict[str, set[str]] = {}
    for path in DEFINITIONS:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in SUFFIXES
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                continue
            tags: set[str] = set()
            for kw in node.keywords:
                if kw.arg == "tag_keys":
                    tags = {elt.value for elt in kw.value.elts}  # type: ignore[attr-defined]
            name = f"ray_{node.args[0].value}"
            for suffix in SUFFIXES[node.func.attr]:
                series[name + suffix] = tags
    return series


def _queries(dashboard: dict) -> list[tuple[str, str]]:
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def _labels_used(expr: str) -> set[str]:
    labels = set()
    for selector in re.findall(r"\{([^{}]*)\}", expr):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", selector))
    for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
        labels |= {g.strip() for g in group.split(",") if g.strip()}
    return labels


def test_the_definitions_are_found() -> None:
    series = exported()
    assert "ray_driver_review_backlog" in series
    assert "ray_driver_review_decisions_total" in series
    assert "ray_driver_review_external_call_seconds_bucket" in series
    assert "ray_driver_review_webhooks_total" in series
    assert series["ray_driver_review_backlog"] == {"instance", "stage", "lane"}


def test_every_query_names_an_exported_series_with_its_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    series = exported()
    queries = _queries(dashboard)
    assert queries
    for title, expr in queries:
        names = set(re.findall(r"\bray_driver_review_\w+", expr))
        assert names, f"{title!r}: queries no ray_driver_review_* series: {expr}"
        for name in names:
            assert name in series, f"{title!r}: {name} is not exported (have {sorted(series)})"
            unknown = _labels_used(expr) - series[name] - ADDED_LABELS
            assert not unknown, f"{title!r}: {name} has no label {sorted(unknown)}"
        # The pipeline's instance tag is exported_instance in Prometheus.
        assert 'exported_instance=~"$instance"' in expr, f"{title!r}: not filtered by instance"


def test_every_exported_metric_has_a_panel() -> None:
    used = {
        name
        for _, expr in _queries(json.loads(DASHBOARD.read_text()))
        for name in re.findall(r"\bray_driver_review_\w+", expr)
    }
    bases = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    defined = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in exported()}
    assert defined - bases == set(), f"no panel shows {sorted(defined - bases)}"


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "driver-review" and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert names == {"datasource", "SessionName", "instance"}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == "${datasource}" and panel["targets"], panel["title"]
