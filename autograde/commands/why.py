"""`course why`: every point a student lost, in the grader's full words (for the instructor alone)."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Show every point a student lost in full: the check's message, what their code returned, the traceback."
DESCRIPTION = """\
Print, for one student's lab in OUT (the --out folder of `course grade`), every test cell that lost
points: the verdict the student's feedback shows, and the instructor's record of it
(OUT/instructor/<lab>/<student>.json): the check's own message (the call, the expected value, the
hint), what the student's code returned, the student's traceback and the test cell's line, hidden
tests included. From a notebook's first hidden check on, the feedback shows only fixed sentences
(what a check says could carry the hidden inputs); this is what they replace. Then the grade's
history: every time it was graded (old scores are kept), and every change people made.

This is for answering a regrade request: never paste a hidden check's message or the test cell's
line into a reply, which would give the hidden inputs away.

examples:
  course why grades/ s1234567
  course why grades/ s1234567 --lab lab02-prefill-vs-decode
"""


def add_arguments(parser) -> None:
    parser.add_argument("out", type=Path, metavar="OUT", help="the --out folder of `course grade`")
    parser.add_argument("student", metavar="STUDENT", help="the student id (as in the score table)")
    parser.add_argument("--lab", help="the lab (default: every lab of the student's in OUT)")


def _indented(text: str, prefix: str = "      ") -> str:
    return "\n".join(prefix + line for line in str(text).splitlines())


def explain(out: Path, stored, state) -> list[str]:
    """The lines `course why` prints for one result."""
    from autograde.final import final_grade
    from autograde.store import ResultStore

    result = stored.result
    final = final_grade(stored, state)
    record = ResultStore(out).load_instructor_record(result.lab, result.student) or {}
    lines = [f"{result.student}/{result.lab}: {final.score:g} of {final.max_score:g}"
             + ("" if final.autograded else " (grading did not finish: see problems)")
             + (f" ({final.awaiting_ta:g} points of written answers await a TA: course mark)" if final.awaiting else "")
             + f"; the autograder's {final.auto_score:g}"]
    for lost in result.lost_points():
        lines.append(f"  {lost['notebook']}/{lost['cell']}: -{lost['points_lost']:g} ({lost['status']})")
        lines.append("    the student sees: " + str(lost["reason"] or "").splitlines()[0][:300] if lost["reason"] else
                     "    the student sees: (no reason)")
        detail = (record.get(lost["notebook"]) or {}).get("test_cells", {}).get(lost["cell"])
        if detail is None:
            continue
        lines.append(f"    {detail['error']}: ")
        lines.append(_indented(detail["message"] or "(no message)"))
        if detail.get("got"):
            lines.append(f"    got (what the student's code returned): {detail['got']}")
        if detail.get("student_traceback"):
            lines.append("    the student's traceback:\n" + _indented(detail["student_traceback"]))
        lines.append("    the test cell:\n" + _indented(detail["grader_traceback"]))
    for notebook, detail in sorted(record.items()):
        for other in (detail or {}).get("other_cells", []):
            lines.append(f"  {notebook}, cell {other['cell']} (`{other['first_line']}`) raised {other['error']}, "
                         "not shown in the feedback:\n" + _indented(other["message"]))
    gradings = state.gradings(result.lab, result.student)
    if gradings:
        lines.append("  graded: " + "; ".join(f"{event.at[:19]} {event.value:g}/{event.data.get('max_score', 0):g} "
                                              f"(tests {event.data.get('tests', '?')[:8]})" for event in gradings))
    for change in final.adjustments:
        lines.append(f"  changed by {change['who']} at {change['at'][:19]}: {change['kind']} {change['what']} "
                     f"{change['from']} -> {change['to']}: {change['why']}")
    if final.late_penalty:
        lines.append(f"  late penalty: -{final.late_penalty:g} ({final.hand_in['status']}, rule {final.hand_in['rule']})")
    return lines


def run(args) -> int:
    from autograde.layout import GradingError
    from autograde.ledger import Ledger
    from autograde.store import ResultStore

    try:
        if not (args.out / "results").is_dir():
            raise GradingError(f"{args.out} holds no results/ folder: give the --out folder of `course grade`")
        stored, _ = ResultStore(args.out).all()
        mine = [entry for entry in stored if entry.result.student == args.student
                and (args.lab is None or entry.result.lab == args.lab)]
        if not mine:
            students = sorted({entry.result.student for entry in stored})
            raise GradingError(f"{args.student}: no result in {args.out}" + (f" for {args.lab}" if args.lab else "")
                               + f"; students there: {', '.join(students[:15])}{' ...' if len(students) > 15 else ''}")
    except GradingError as error:
        print(f"course why: {error}", file=sys.stderr)
        return 1
    state = Ledger(args.out).state()
    for entry in mine:
        print("\n".join(explain(args.out, entry, state)))
    return 0
