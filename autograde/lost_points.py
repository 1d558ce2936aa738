"""The instructor's record of why each point was lost, in the grader's full words.

From a notebook's first hidden check on, the graded notebook (so the feedback, ``results/`` and
report.json too) keeps only the grader's fixed sentences (``withhold``): what a check's message
says could carry the hidden inputs to the student. An instructor answering a regrade request needs
the real words: the check's message (the call and the expected value), what the student's code
returned, the hint, the traceback on both sides. ``NotebookRecord`` keeps them in the grader
process, where the test cells run (``testcells.run_test_cell``'s ``on_error``), before anything is
withheld, and the answer cells' own errors that the notebook no longer shows. ``IsolatedExecute``
writes the record beside the graded notebook in the grading workspace (``record_path``: a folder
the student's kernel cannot see); the worker sends it back apart from the result, and ``store``
writes it to ``OUT/instructor/<lab>/<student>.json``. It is never copied into ``feedback/``, the
result files or report.json: nothing a student receives. ``course why OUT STUDENT`` prints it.

Each text is bounded (``REASON_BYTES``) and every value the student's code returned is shown by
``plain_repr``, which calls no code of the student's (a handle to their object is named, not asked).
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path

from autograde.results import REASON_BYTES

__all__ = ["NotebookRecord", "plain_repr", "read_record", "record_path"]

MAX_ITEMS = 8          # items of a list or dict shown
MAX_DEPTH = 3
MAX_CELLS = 200        # cells a notebook's record keeps


def _clip(text, limit: int = REASON_BYTES) -> str:
    from course_lib.runner.bounded import clip

    return clip(text, limit, "text")


def plain_repr(value, depth: int = 0) -> str:
    """A repr of plain data (numbers, strings, containers, tensors) that runs no code of the student's."""
    if value is None or isinstance(value, (bool, int, float, complex)):
        return repr(value)
    if isinstance(value, (str, bytes)):
        return repr(value[:200]) + ("..." if len(value) > 200 else "")
    if depth >= MAX_DEPTH:
        return "..."
    if type(value) in (list, tuple, set, frozenset):
        items = [plain_repr(item, depth + 1) for item in list(value)[:MAX_ITEMS]]
        more = ", ..." if len(value) > MAX_ITEMS else ""
        opening, closing = {list: "[]", tuple: "()", set: "{}", frozenset: "{}"}[type(value)]
        return f"{opening}{', '.join(items)}{more}{closing}"
    if type(value) is dict:
        items = [f"{plain_repr(key, depth + 1)}: {plain_repr(item, depth + 1)}"
                 for key, item in list(value.items())[:MAX_ITEMS]]
        return "{" + ", ".join(items) + (", ..." if len(value) > MAX_ITEMS else "") + "}"
    module = type(value).__module__ or ""
    if module.startswith(("torch", "numpy")) and hasattr(value, "shape"):
        return _clip(repr(value), 1024)   # the grader's own copy of the data: torch's repr, local
    return f"<{type(value).__name__} object of the student's>"


def _got(error: BaseException) -> str | None:
    """What the student's code returned, from the check that failed: ``course_lib.checks.fail``'s ``got``
    (a hidden check's message leaves it out; the instructor's record keeps it)."""
    tb = error.__traceback__
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "fail" and frame.f_globals.get("__name__") == "course_lib.checks" \
                and frame.f_locals.get("show_values", True):
            found = plain_repr(frame.f_locals.get("got"))
        tb = tb.tb_next
    return found


def _student_traceback(error: BaseException) -> str:
    seen, current = set(), error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        remote = getattr(current, "remote_traceback", "")
        if remote:
            return _clip(remote)
        current = current.__cause__ or current.__context__
    return ""


def _grader_traceback(error: BaseException, source: str) -> str:
    """The grader's side: the frames of the test cell (with its lines: hidden tests included) and the checks."""
    lines = source.splitlines()
    shown = []
    for frame, line_number in traceback.walk_tb(error.__traceback__):
        name = frame.f_code.co_filename
        if name.startswith("<test cell"):
            text = lines[line_number - 1].strip() if 0 < line_number <= len(lines) else ""
            shown.append(f"  {name}, line {line_number}: {text}")
        elif "course_lib" in name:
            shown.append(f"  {Path(name).name}:{line_number} in {frame.f_code.co_name}")
    shown.append(f"{type(error).__name__}: {error}")
    return _clip("\n".join(shown))


class NotebookRecord:
    """The full story of one notebook's lost points, collected while it is graded."""

    def __init__(self) -> None:
        self.cells: dict[str, dict] = {}        # grade_id -> the test cell's error, in full
        self.other_cells: list[dict] = []       # answer cells whose errors the notebook no longer shows

    def test_cell_error(self, grade_id: str, error: BaseException, source: str, *, hidden_started: bool) -> None:
        if len(self.cells) >= MAX_CELLS:
            return
        self.cells[grade_id] = {
            "error": type(error).__name__ if not getattr(error, "ename", None) else str(error.ename),
            "message": _clip(str(error)),
            "got": _got(error),
            "student_traceback": _student_traceback(error),
            "grader_traceback": _grader_traceback(error, source),
            "after_hidden_checks": hidden_started,
        }

    def answer_cell_error(self, index: int, source: str, output: dict) -> None:
        if len(self.other_cells) >= MAX_CELLS:
            return
        first = next((line for line in source.splitlines() if line.strip()), "")[:120]
        self.other_cells.append({"cell": index + 1, "first_line": first, "error": _clip(output.get("ename", ""), 200),
                                 "message": _clip(output.get("evalue", "")),
                                 "traceback": _clip("\n".join(map(str, output.get("traceback") or [])))})

    def as_dict(self) -> dict:
        return {"test_cells": self.cells, "other_cells": self.other_cells}

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1, ensure_ascii=False), encoding="utf-8")


def record_path(workspace: Path, student: str, lab: str, notebook: str) -> Path:
    """Where ``IsolatedExecute`` leaves a notebook's record in the grading workspace."""
    return Path(workspace) / "instructor" / student / lab / f"{notebook}.json"


def read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
