"""The demo's live view: a table redrawn on a terminal, and when the output is a log or a
pipe, one line that says as much (every stage, in the pipeline's order, labelled)."""

from __future__ import annotations

import io

from serve_app.demo import Frame, StageRow, View


def _frame(phase: str = "live") -> Frame:
    return Frame(
        heading=f"[{phase}     5s] catalog: 140 changes, 360 calls, 429s 0.0%",
        stages=[
            StageRow("intake", queued=708, workers=1, in_flight=62, held=62),
            StageRow("security", queued=0, workers=2, in_flight=32, held=5),
            StageRow("compatibility", queued=36, workers=None, in_flight=0, held=0),
        ],
        decisions="decisions: approved 44, rejected 5; governor 160/s (slow_start)",
    )


def test_a_plain_line_names_every_stage_in_order_with_its_figures() -> None:
    line = _frame().line()
    assert "\n" not in line
    assert line.index("intake") < line.index("security") < line.index("compatibility")
    assert "intake 708 queued, 1 worker, 62 in flight (62 held)" in line
    assert "security 0 queued, 2 workers, 32 in flight (5 held)" in line
    assert "compatibility 36 queued, pool not answering" in line
    assert line.startswith("[live") and line.endswith("(slow_start)")


def test_the_table_has_a_row_per_stage_under_its_column_names() -> None:
    heading, columns, *rows, decisions = _frame().table()
    assert heading.startswith("[live") and decisions.strip().startswith("decisions:")
    assert columns.split() == ["stage", "queued", "workers", "in", "flight", "held"]
    assert [r.split() for r in rows] == [
        ["intake", "708", "1", "62", "62"],
        ["security", "0", "2", "32", "5"],
        ["compatibility", "36", "?", "0", "0"],
    ]


def test_off_a_terminal_lines_come_every_few_seconds_and_the_last_frame_always() -> None:
    out = io.StringIO()  # not a terminal
    view = View(out)
    view.show(_frame())
    view.show(_frame())  # within the interval: not written
    view.show(_frame("done"), last=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("[done")
    assert "\x1b" not in out.getvalue()  # no cursor movement in a log
