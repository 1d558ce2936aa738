"""Writing the results: grades.csv (nbgrader's export columns), report.json and the score table.

Every grade shown is ``final.FinalGrade``'s (the autograder's points with the staff's changes and
the late penalty applied); the autograder's own points stay beside it. Both files are written to a
temporary name and renamed into place, so a crash never leaves a half-written gradebook behind.

report.json holds, besides every submission's cells and lost points:

- ``intake``: one line per file or folder of SUBMISSIONS (graded, not graded and why, ignored and why)
  and, with ``--roster``, who handed in nothing and which hand-ins match no student;
- ``labs``: per lab, the versions of its tests (and of the grader) its results were graded with;
  a lab graded on more than one is flagged (``mixed_tests``): regrade the rest with ``--resume``;
- per submission: ``final`` (the grade and every change to it: who, when, why), ``hand_in`` (due,
  handed in, on what basis, late penalty), ``gradings`` (every time it was graded, from the ledger:
  old scores are kept) and ``instructor_record`` (the file with the full words of every lost point,
  for the instructor alone).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from autograde.due import late_note
from autograde.ledger import LedgerState
from autograde.results import MISSING, NOT_ATTEMPTED, PASSED, PROBLEM_BYTES, LabResult

# nbgrader's CSV export columns, in its order; then ours: `skipped_points` (GPU-only checks skipped on a
# CPU, left out of max_score), `penalty` (the staff's, apart from the late penalty), `complete` (yes;
# no: grading failed; awaiting TA: written answers are not all marked; score is left empty unless yes)
# and `awaiting_ta` (the points of the written answers no TA has marked yet).
CSV_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
               "raw_score", "late_submission_penalty", "score", "max_score", "skipped_points", "penalty", "complete",
               "awaiting_ta"]


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _number(value: float) -> str:
    return f"{value:g}"


def grades_csv(stored, finals) -> str:
    """nbgrader's export columns, the late penalty and the staff's changes applied; an incomplete grading
    leaves ``score`` empty (never a zero)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for entry, final in sorted(zip(stored, finals), key=lambda pair: (pair[0].result.lab, pair[0].result.student)):
        result = entry.result
        details = final.hand_in or {}
        writer.writerow({
            "assignment": result.lab, "duedate": details.get("due") or "",
            "timestamp": details.get("handed_in") or result.timestamp,
            "student_id": result.student, "last_name": "", "first_name": "", "email": "",
            "raw_score": _number(final.raw_score), "late_submission_penalty": _number(final.late_penalty),
            "score": _number(final.score) if final.complete else "", "max_score": _number(final.max_score),
            "skipped_points": _number(result.skipped_points), "penalty": _number(final.penalty),
            "complete": "yes" if final.complete else "awaiting TA" if final.autograded else "no",
            "awaiting_ta": _number(final.awaiting_ta),
        })
    return buffer.getvalue()


def graded_versions(stored) -> dict[str, dict]:
    """{lab: {"tests": {digest: [students]}, "graders": {fingerprint: [students]}}} of the complete results."""
    labs: dict[str, dict] = {}
    for entry in stored:
        if not entry.complete:
            continue
        lab = labs.setdefault(entry.result.lab, {"tests": {}, "graders": {}})
        lab["tests"].setdefault(str(entry.key.get("lab_sources", ""))[:12], []).append(entry.result.student)
        lab["graders"].setdefault(str(entry.key.get("grader", "")), []).append(entry.result.student)
    return labs


def older_tests(stored, current_tests: dict[str, str] | None) -> set[tuple[str, str]]:
    """(lab, student) of the results graded on tests other than the lab's current ones (or, with no
    current digest known, other than the most common one in a lab graded on several)."""
    versions = graded_versions(stored)
    older = set()
    for entry in stored:
        lab = versions.get(entry.result.lab)
        if not entry.complete or lab is None:
            continue
        digest = str(entry.key.get("lab_sources", ""))[:12]
        current = (current_tests or {}).get(entry.result.lab, "")[:12]
        if not current:
            if len(lab["tests"]) < 2:
                continue
            current = max(lab["tests"], key=lambda d: len(lab["tests"][d]))
        if digest != current:
            older.add((entry.result.lab, entry.result.student))
    return older


def _labs_section(stored, current_tests) -> dict:
    labs = {}
    for lab, versions in sorted(graded_versions(stored).items()):
        current = (current_tests or {}).get(lab, "")[:12] or None
        labs[lab] = {"tests": versions["tests"], "current_tests": current,
                     "mixed_tests": len(versions["tests"]) > 1 or (current is not None and set(versions["tests"]) != {current}),
                     "graders": versions["graders"], "mixed_graders": len(versions["graders"]) > 1}
    return labs


def version_warnings(stored, current_tests: dict[str, str] | None = None) -> list[str]:
    """One line per lab graded on more than one version of its tests or of the grader."""
    lines = []
    for lab, section in _labs_section(stored, current_tests).items():
        if section["mixed_tests"]:
            counts = ", ".join(f"{len(students)} on {digest}" for digest, students in section["tests"].items())
            lines.append(f"{lab}: graded on {len(section['tests'])} version(s) of its tests ({counts}"
                         + (f"; the current ones are {section['current_tests']}" if section["current_tests"] else "")
                         + "): regrade with `course grade ... --resume` (it regrades what was graded on other tests)")
        if section["mixed_graders"]:
            lines.append(f"{lab}: graded by {len(section['graders'])} versions of the grader "
                         f"({', '.join(section['graders'])}): `--resume` regrades what another version graded")
    return lines


def intake_lines(intake: dict | None, stored) -> list[dict]:
    """The intake's sources with their outcome as the result files now say (graded, grading failed, ...)."""
    if not intake:
        return []
    results = {f"{entry.result.student}/{entry.result.lab}": entry for entry in stored}
    lines = []
    for source in intake.get("sources", []):
        line = dict(source)
        if source["outcome"] == "to grade":
            done = [key for key in source["hand_ins"] if key in results and results[key].complete]
            failed = [key for key in source["hand_ins"] if key in results and not results[key].complete]
            left = [key for key in source["hand_ins"] if key not in results]
            if done and not failed and not left:
                line.update(outcome="graded", reason="as " + ", ".join(done))
            elif failed:
                line.update(outcome="not graded", reason="grading failed for " + ", ".join(failed) + " (see problems)")
            else:
                line.update(outcome="not graded", reason="not graded in this run (--lab or --student left it out)"
                            + (f"; graded: {', '.join(done)}" if done else ""))
        lines.append(line)
    return lines


def report_json(stored, finals, problems: list[str], *, state: LedgerState | None = None, device: str, timeout: int,
                limits: dict | None = None, intake: dict | None = None, current_tests: dict | None = None) -> str:
    from course_lib.runner.bounded import clip

    state = state or LedgerState()
    report = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "per_cell_timeout_s": timeout,
        "kernel_limits": limits,
        "intake": intake_lines(intake, stored),
        "roster": (intake or {}).get("roster"),
        "ungraded_folders": [clip(str(problem), PROBLEM_BYTES) for problem in problems],
        "labs": _labs_section(stored, current_tests),
        "submissions": [_entry(entry, final, state) for entry, final in zip(stored, finals)],
    }
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _entry(stored, final, state: LedgerState) -> dict:
    result = stored.result
    entry = result.as_dict()
    record = Path("instructor") / result.lab / f"{result.student}.json"
    entry.update(auto_score=result.score, score=final.score if final.autograded else None, max_score=final.max_score,
                 percent=round(final.percent, 1), complete=final.complete, autograded=stored.complete,
                 awaiting_ta=final.awaiting_ta, awaiting=final.awaiting, final=final.as_dict(),
                 hand_in=final.hand_in, intake=stored.hand_in,
                 gradings=[{"at": event.at, "score": event.value, "max_score": event.data.get("max_score"),
                            "tests": event.data.get("tests"), "complete": event.data.get("complete")}
                           for event in state.gradings(result.lab, result.student)],
                 instructor_record=str(record))
    return entry


def write_outputs(out_dir: Path, stored, finals, problems: list[str], *, state: LedgerState | None = None,
                  device: str, timeout: int, limits: dict | None = None, intake: dict | None = None,
                  current_tests: dict | None = None) -> tuple[Path, Path]:
    grades_path, report_path = out_dir / "grades.csv", out_dir / "report.json"
    _atomic_write(grades_path, grades_csv(stored, finals))
    _atomic_write(report_path, report_json(stored, finals, problems, state=state, device=device, timeout=timeout,
                                           limits=limits, intake=intake, current_tests=current_tests))
    return grades_path, report_path


def score_table(stored, finals, *, current_tests: dict | None = None) -> str:
    """A fixed-width table of final scores with the main reason for each lost point, the staff's changes,
    lateness, flags (renamed notebooks, identity conflicts) and results graded on older tests."""
    if not stored:
        return "(no submissions graded)"
    older = older_tests(stored, current_tests)
    student_width = max(7, *(len(entry.result.student) for entry in stored))
    lab_width = max(3, *(len(entry.result.lab) for entry in stored))
    lines = [f"{'student':<{student_width}}  {'lab':<{lab_width}}  {'score':>11}  {'%':>5}  notes",
             f"{'-' * student_width}  {'-' * lab_width}  {'-' * 11}  {'-' * 5}  {'-' * 5}"]
    for entry, final in sorted(zip(stored, finals), key=lambda pair: (pair[0].result.lab, pair[0].result.student)):
        result = entry.result
        notes = [_notes(result), _written_note(result, final), late_note(final.hand_in), _adjusted(final)]
        if any(flag.startswith("conflict") for flag in (entry.hand_in or {}).get("flags", [])):
            notes.append("identity conflict (see its SUBMISSIONS line)")
        if (result.lab, result.student) in older:
            notes.append("graded on older tests")
        score = f"{_number(final.score)}/{_number(final.max_score)}" if final.autograded else \
            f"-/{_number(final.max_score)}"
        percent = f"{final.percent:>4.0f}%" if final.complete else "    -"
        lines.append(f"{result.student:<{student_width}}  {result.lab:<{lab_width}}  {score:>11}  "
                     f"{percent}  {', '.join(filter(None, notes))}")
    return "\n".join(lines)


def _adjusted(final) -> str | None:
    kinds = Counter(change["kind"] for change in final.adjustments)
    if not kinds:
        return None
    words = {"cell": "cell score", "score": "score", "penalty": "penalty", "extension": "extension"}
    return "staff: " + ", ".join(f"{count} {words[kind]}s" if count > 1 else words[kind] for kind, count in kinds.items())


def _written_note(result: LabResult, final) -> str | None:
    """E.g. "3 points await a TA (1 written answer)", "1 written answer not attempted"."""
    parts = []
    if final.awaiting_ta:
        count = len(final.awaiting)
        parts.append(f"{_number(final.awaiting_ta)} points await a TA ({count} written answer{'s' if count > 1 else ''})")
    blank = sum(cell.written and cell.status == NOT_ATTEMPTED for nb in result.notebooks for cell in nb.cells)
    if blank:
        parts.append(f"{blank} written answer{'s' if blank > 1 else ''} not attempted")
    return ", ".join(parts) or None


def awaiting_lines(finals, out_dir: Path | None = None) -> list[str]:
    """Per lab, the written answers that await a TA, notebook by notebook (answers and points): what
    ``course grade`` prints under its table, with the command that grades them."""
    labs: dict[str, dict[str, list[float]]] = {}
    for final in finals:
        for key, points in final.awaiting.items():
            notebook = labs.setdefault(final.lab, {}).setdefault(key.split("/", 1)[0], [0, 0.0])
            notebook[0] += 1
            notebook[1] += points
    lines = []
    for lab, notebooks in sorted(labs.items()):
        parts = [f"{name} {count} answer{'s' if count > 1 else ''}, {_number(points)} points"
                 for name, (count, points) in sorted(notebooks.items())]
        lines.append(f"{lab}: written answers await a TA: {'; '.join(parts)}"
                     + (f" (course mark {out_dir} --lab {lab})" if out_dir is not None else ""))
    return lines


def _notes(result: LabResult) -> str:
    """E.g. "2 failed, 1 timeout" or "01_tokenization malformed"."""
    counts: Counter[str] = Counter()
    missing = [notebook for notebook in result.notebooks if notebook.status == MISSING]
    if missing:
        counts[f"handed in {len(result.notebooks) - len(missing)} of {len(result.notebooks)} notebooks"] += 1
    for notebook in result.notebooks:
        if notebook.handed_in_as:
            counts[f"{notebook.name} graded from {notebook.handed_in_as} (renamed)"] += 1
        if notebook.status == MISSING:
            continue
        if notebook.status != "graded":
            counts[f"{notebook.name} {notebook.status}"] += 1
            continue
        counts.update(cell.status for cell in notebook.cells if cell.status != PASSED and not cell.written)
    counts.update(result.problems and ["see problems in report.json"])
    if not counts:
        return "all tests passed"
    return ", ".join(f"{count} {status}" if count > 1 else status for status, count in counts.items())


def intake_table(lines: list[dict]) -> str:
    """One line per SUBMISSIONS entry: what became of it (the intake block of ``course grade``'s output)."""
    if not lines:
        return ""
    width = min(60, max(5, *(len(line["entry"]) for line in lines)))
    shown = []
    for line in lines:
        entry = line["entry"] if len(line["entry"]) <= width else line["entry"][:width - 3] + "..."
        text = f"{entry:<{width}}  {line['outcome']:<10}  {line['reason']}"
        flags = [note for note in line.get("notes", []) if note.startswith(("conflict", "placed:"))
                 or "not in the roster" in note or "matches no student" in note]
        shown.append(text + "".join(f"\n{'':<{width}}  {'':<10}  ! {flag}" for flag in flags))
    return "\n".join(shown)


def one_line_summary(finals, *, max_entries: int = 8) -> str:
    """`correct 100% · blank 0% · ...` (one entry per student and lab), or one line per lab when
    there are more than ``max_entries`` results (the table above already lists each one)."""
    multiple_labs = len({f.lab for f in finals}) > 1
    if len(finals) > max_entries:
        lines = []
        for lab in sorted({f.lab for f in finals}):
            percents = sorted(f.percent for f in finals if f.lab == lab)
            middle = len(percents) // 2
            median = percents[middle] if len(percents) % 2 else (percents[middle - 1] + percents[middle]) / 2
            full = sum(p >= 100 for p in percents)
            zero = sum(p == 0 for p in percents)
            pending = sum(bool(f.awaiting) for f in finals if f.lab == lab)
            lines.append(f"{lab}: {len(percents)} graded, median {median:.0f}%, {full} with full marks, {zero} with zero"
                         + (f", {pending} with written answers awaiting a TA" if pending else ""))
        return "\n".join(lines)
    entries = []
    for final in sorted(finals, key=lambda f: (f.lab, f.student)):
        name = f"{final.student}/{final.lab}" if multiple_labs else final.student
        pending = f" (+{_number(final.awaiting_ta)} awaiting a TA)" if final.awaiting_ta else ""
        entries.append(f"{name} {final.percent:.0f}%{pending}")
    return " · ".join(entries)
