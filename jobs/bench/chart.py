"""``bench.png``: one panel per scenario, drawn from the JSON document alone.

matplotlib is an optional dependency (the ``bench`` extra), imported here and only here;
without it the chart is skipped with a one-line note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MISSING_NOTE = (
    "matplotlib is not installed: no chart (pip install 'driver-review[bench]' to get one)"
)


def draw(doc: dict[str, Any], path: Path) -> str | None:
    """Write the chart to ``path``; return a note instead when it cannot be drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return MISSING_NOTE
    sc = doc.get("scenarios", {})
    fig, axes = plt.subplots(2, 4, figsize=(22, 9.5))
    panels = (_utilization, _timeline, _peers, _cache, _latency, _ingress, _ledger, _isolation)
    for ax, panel in zip(axes.flat, panels, strict=True):
        try:
            panel(ax, sc)
        except (KeyError, TypeError, ValueError):
            ax.set_axis_off()
            ax.text(0.5, 0.5, f"{panel.__name__.strip('_')}: not run", ha="center")
    machine = doc.get("machine", {})
    fig.suptitle(
        f"driver-review benchmark ({'quick' if doc['bench']['quick'] else 'full'}) — "
        f"{machine.get('cores')} cores, Ray {machine.get('ray')}, load average "
        f"{machine.get('load_average_start')} → {machine.get('load_average_end')}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None


def _bars(
    ax: Any,
    labels: list[str],
    values: list[float | None],
    title: str,
    ylabel: str,
    line: float | None = None,
    fmt: str = "{:.2f}",
) -> None:
    heights = [v or 0.0 for v in values]
    bars = ax.bar(
        labels,
        heights,
        color=["#4C72B0", "#DD8452", "#55A868", "#C44E52"][: len(labels)] * (len(labels) // 4 + 1),
    )
    for bar, v in zip(bars, values, strict=True):
        ax.annotate(
            "n/a" if v is None else fmt.format(v),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if line is not None:
        ax.axhline(line, color="grey", linestyle="--", linewidth=1)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelsize=8)


def _utilization(ax: Any, sc: dict) -> None:
    runs = sc["utilization"]["runs"]
    labels = list(runs)
    _bars(
        ax,
        labels,
        [runs[k]["utilization_ratio"] for k in labels],
        "1. rate-limit utilization (useful calls/s ÷ R)",
        "ratio",
        line=0.95,
    )
    for i, k in enumerate(labels):
        ax.annotate(
            f"429s {100 * (runs[k]['rate_limited_share'] or 0):.2f}%\n"
            f"wall/min {runs[k]['wall_to_minimum_ratio'] or 0:.2f}",
            (i, 0.05),
            ha="center",
            fontsize=8,
            color="white",
        )


def _timeline(ax: Any, sc: dict) -> None:
    series = {"driver-review": sc["utilization"]["runs"]["no_headers"]}
    # A peer that errored has no series: it never reached the truth.
    series.update(
        {
            name: peer
            for name, peer in sc.get("peers", {}).get("peers", {}).items()
            if peer.get("useful_calls_per_second_series")
        }
    )
    for name, run in series.items():
        ax.plot(run["useful_calls_per_second_series"], label=name, linewidth=1)
    ax.axhline(sc["utilization"]["settings"]["rate_limit_per_s"], color="grey", linestyle="--")
    ax.set_title("useful catalog calls per second (from the first review call)", fontsize=10)
    ax.set_xlabel("s")
    ax.legend(fontsize=8)


def _peers(ax: Any, sc: dict) -> None:
    p = sc["peers"]
    names = ["driver_review", *p["peers"]]
    # Each peer at the best setting of its grid; an errored peer is drawn as no bar.
    runs = [p["driver_review"], *(peer.get("best", {}) for peer in p["peers"].values())]
    _bars(
        ax,
        names,
        [r.get("active_s") or 0 for r in runs],
        "2. same sweep: active wall time (peers: best of grid)",
        "s",
        fmt="{:.0f}s",
    )
    for i, r in enumerate(runs):
        if not r:
            ax.annotate("error:\nno truth", (i, 1), ha="center", fontsize=8)
            continue
        text = (
            f"429s {100 * (r['rate_limited_share'] or 0):.0f}%\n"
            f"{r['calls_per_decision_ratio'] or 0:.1f} calls/dec"
        )
        ax.annotate(
            text,
            (i, 1),
            ha="center",
            fontsize=8,
            bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0},
        )


def _cache(ax: Any, sc: dict) -> None:
    c = sc["cache"]
    _bars(
        ax,
        ["GETs per\nchanged version", "packages per\nsecurity review", "GETs per\ndecision"],
        [
            c["driver_gets_per_changed_version_ratio"],
            c["package_fetches_per_security_review_ratio"],
            c["driver_gets_per_decision_ratio"],
        ],
        f"3. cache: {c['changed_versions']} of {c['drivers']} drivers changed",
        "ratio",
        line=1.0,
    )


def _latency(ax: Any, sc: dict) -> None:
    lat = sc["latency"]
    keys = ("intake_decision", "intake_overhead", "final_decision", "final_overhead")
    labels, values = [], []
    for k in keys:
        for p in ("p50_s", "p99_s"):
            labels.append(f"{k.replace('_', chr(10))}\n{p[:3]}")
            values.append(lat[k][p])
    _bars(ax, labels, values, "4. ping acceptance → decision", "s", fmt="{:.3f}")
    ax.tick_params(axis="x", labelsize=6)


def _ingress(ax: Any, sc: dict) -> None:
    rates = sc["ingress"]["accepted_per_s"]
    _bars(
        ax,
        list(rates),
        list(rates.values()),
        "5. signed pings accepted per second",
        "pings/s",
        fmt="{:.0f}",
    )


def _ledger(ax: Any, sc: dict) -> None:
    sizes = sc["ledger"]["sizes"]
    metrics = (
        "bytes_per_driver_ratio",
        "stale_select_ratio",
        "snapshot_write_ratio",
        "snapshot_load_ratio",
    )
    width = 0.8 / len(sizes)
    for i, (n, fig) in enumerate(sizes.items()):
        xs = [m + i * width for m in range(len(metrics))]
        ax.bar(xs, [fig["ledger_to_dict"][m] for m in metrics], width, label=f"{int(n):,}")
    ax.set_xticks(
        [m + width * (len(sizes) - 1) / 2 for m in range(len(metrics))],
        ["bytes", "slice", "snap write", "snap load"],
        fontsize=8,
    )
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linestyle="--")
    ax.set_title("6. ledger ÷ dict of objects (lower is better)", fontsize=10)
    ax.legend(fontsize=8, title="drivers")


def _isolation(ax: Any, sc: dict) -> None:
    iso = sc["isolation"]
    stages = list(iso["throughput_ratio"])
    _bars(
        ax,
        stages,
        [iso["throughput_ratio"][s] for s in stages],
        f"7. throughput beside a slow stage ({iso['slowdown_ratio'] or 0:.1f}x slower)",
        "slow run ÷ fast run",
        line=0.9,
    )
