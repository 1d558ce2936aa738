"""Writing the results: grades.csv (nbgrader's export columns), report.json and the score table.

Both files are written to a temporary name and renamed into place, so a crash never leaves a
half-written gradebook behind.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from autograde.due import DueTimes, hand_in, late_note
from autograde.results import MISSING, PASSED, LabResult

# nbgrader's CSV export columns, in its order; `skipped_points` (GPU-only checks skipped on a
# CPU, left out of max_score) is ours and comes last.
CSV_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
               "raw_score", "late_submission_penalty", "score", "max_score", "skipped_points"]


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _number(value: float) -> str:
    return f"{value:g}"


def grades_csv(results: list[LabResult], due: DueTimes = DueTimes()) -> str:
    """nbgrader's export columns; ``duedate`` from ``--due`` (no late penalty: that is the course's policy)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for result in sorted(results, key=lambda r: (r.lab, r.student)):
        deadline = due.for_lab(result.lab)
        writer.writerow({
            "assignment": result.lab, "duedate": f"{deadline.isoformat(sep=' ')} UTC" if deadline else "",
            "timestamp": result.timestamp,
            "student_id": result.student, "last_name": "", "first_name": "", "email": "",
            "raw_score": _number(result.score), "late_submission_penalty": "0",
            "score": _number(result.score), "max_score": _number(result.max_score),
            "skipped_points": _number(result.skipped_points),
        })
    return buffer.getvalue()


def report_json(results: list[LabResult], problems: list[str], *, device: str, timeout: int,
                limits: dict | None = None, due: DueTimes = DueTimes()) -> str:
    from autograde.results import PROBLEM_BYTES
    from course_lib.runner.bounded import clip

    report = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "per_cell_timeout_s": timeout,
        "kernel_limits": limits,
        "ungraded_folders": [clip(str(problem), PROBLEM_BYTES) for problem in problems],
        "submissions": [_with_hand_in(result.as_dict(), hand_in(result, due)) for result in results],
    }
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _with_hand_in(entry: dict, hand_in_entry: dict | None) -> dict:
    return entry if hand_in_entry is None else {**entry, "hand_in": hand_in_entry}


def write_outputs(out_dir: Path, results: list[LabResult], problems: list[str], *, device: str,
                  timeout: int, limits: dict | None = None, due: DueTimes = DueTimes()) -> tuple[Path, Path]:
    grades_path, report_path = out_dir / "grades.csv", out_dir / "report.json"
    _atomic_write(grades_path, grades_csv(results, due))
    _atomic_write(report_path, report_json(results, problems, device=device, timeout=timeout, limits=limits,
                                           due=due))
    return grades_path, report_path


def score_table(results: list[LabResult], due: DueTimes = DueTimes()) -> str:
    """A fixed-width table of scores with the main reason for each lost point (and lateness, with ``due``)."""
    if not results:
        return "(no submissions graded)"
    student_width = max(7, *(len(r.student) for r in results))
    lab_width = max(3, *(len(r.lab) for r in results))
    lines = [f"{'student':<{student_width}}  {'lab':<{lab_width}}  {'score':>11}  {'%':>5}  notes",
             f"{'-' * student_width}  {'-' * lab_width}  {'-' * 11}  {'-' * 5}  {'-' * 5}"]
    for result in sorted(results, key=lambda r: (r.lab, r.student)):
        notes = ", ".join(filter(None, [_notes(result), late_note(result, due)]))
        score = f"{_number(result.score)}/{_number(result.max_score)}"
        lines.append(f"{result.student:<{student_width}}  {result.lab:<{lab_width}}  {score:>11}  "
                     f"{result.percent:>4.0f}%  {notes}")
    return "\n".join(lines)


def _notes(result: LabResult) -> str:
    """E.g. "2 failed, 1 timeout" or "01_tokenization malformed"."""
    counts: Counter[str] = Counter()
    missing = [notebook for notebook in result.notebooks if notebook.status == MISSING]
    if missing:
        counts[f"handed in {len(result.notebooks) - len(missing)} of {len(result.notebooks)} notebooks"] += 1
    for notebook in result.notebooks:
        if notebook.status == MISSING:
            continue
        if notebook.status != "graded":
            counts[f"{notebook.name} {notebook.status}"] += 1
            continue
        counts.update(cell.status for cell in notebook.cells if cell.status != PASSED)
    counts.update(result.problems and ["see problems in report.json"])
    if not counts:
        return "all tests passed"
    return ", ".join(f"{count} {status}" if count > 1 else status for status, count in counts.items())


def one_line_summary(results: list[LabResult], *, max_entries: int = 8) -> str:
    """`correct 100% · blank 0% · ...` (one entry per student and lab), or one line per lab when
    there are more than ``max_entries`` results (the table above already lists each one)."""
    multiple_labs = len({r.lab for r in results}) > 1
    if len(results) > max_entries:
        lines = []
        for lab in sorted({r.lab for r in results}):
            percents = sorted(r.percent for r in results if r.lab == lab)
            middle = len(percents) // 2
            median = percents[middle] if len(percents) % 2 else (percents[middle - 1] + percents[middle]) / 2
            full = sum(p >= 100 for p in percents)
            zero = sum(p == 0 for p in percents)
            lines.append(f"{lab}: {len(percents)} graded, median {median:.0f}%, {full} with full marks, {zero} with zero")
        return "\n".join(lines)
    entries = []
    for result in sorted(results, key=lambda r: (r.lab, r.student)):
        name = f"{result.student}/{result.lab}" if multiple_labs else result.student
        entries.append(f"{name} {result.percent:.0f}%")
    return " · ".join(entries)
