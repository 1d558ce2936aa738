"""`course adjust`: a person's change to a grade (a regrade outcome, a cell's points, a penalty, an extension)."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Change a grade by hand (a regrade, a cell's points, a penalty, an extension): kept with who, when and why."
DESCRIPTION = """\
Record a change to one student's grade in OUT's ledger (OUT/ledger.sqlite), the course staff's
record that no regrade erases, then rebuild grades.csv, report.json and the feedback pages with it
(`course export` and the next `course grade` apply it too). Exactly one change per command:

  --cell NOTEBOOK/CELL --points N   a test cell's points, in place of the autograder's (a regrade of
                                    one check; --extra-credit N adds points beyond the cell's maximum)
  --score N                         the lab's score, in place of the sum of its cells (a regrade
                                    request's outcome)
  --penalty N | N%                  points taken off (N% of the points possible), e.g. for academic
                                    integrity; a late penalty is computed from --late-penalty instead
  --extension WHEN                  this student's own due time for the lab (ISO 8601 with a time and a
                                    zone): the late penalty and every lateness note use it
  --clear cell|score|penalty|extension   remove this student's earlier change of that kind (with
                                    --cell for a cell): the autograder's points (or the lab's due time)
                                    apply again

--why is required: it is kept with who (--by, default you@this-host) and when, for the
instructor (`course history`); --comment is shown to the student at the top of their feedback
pages. Nothing is ever overwritten: a new change is a new event, the old one stays in the
history. A score a TA gives in formgrader is taken into the ledger the same way (by "formgrader")
at the next `course grade` or `course export`.

examples:
  course adjust grades/ s1234567 --score 21 --why "regrade request #12: test_encode's hint misled"
  course adjust grades/ s1234567 --cell 01_tokenization/test_encode --points 3 --why "partial credit" \\
                                 --comment "right idea; the merge order is off by one"
  course adjust grades/ s1234567 --penalty 20% --why "academic integrity case 2026-04"
  course adjust grades/ s1234567 --extension 2026-12-08T23:59-05:00 --why "medical note"
  course adjust grades/ s1234567 --clear score --why "regrade withdrawn"
"""


def add_arguments(parser) -> None:
    parser.add_argument("out", type=Path, metavar="OUT", help="the --out folder of `course grade`")
    parser.add_argument("student", metavar="STUDENT", help="the student id (as in the score table)")
    parser.add_argument("--lab", help="the lab (default: the only lab graded in OUT)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--points", type=float, metavar="N", help="with --cell: the cell's points")
    action.add_argument("--score", type=float, metavar="N", help="the lab's score")
    action.add_argument("--penalty", metavar="N|N%", help="points taken off, or a percentage of the points possible")
    action.add_argument("--extension", metavar="WHEN", help="the student's own due time (e.g. 2026-12-08T23:59Z)")
    action.add_argument("--clear", choices=("cell", "score", "penalty", "extension"),
                        help="remove the student's earlier change of this kind")
    parser.add_argument("--cell", metavar="NOTEBOOK/CELL", help="the cell of --points or --clear cell (its grade id)")
    parser.add_argument("--extra-credit", type=float, default=0.0, metavar="N",
                        help="with --points: points beyond the cell's maximum")
    parser.add_argument("--why", required=True, help="the reason, kept for the instructor (required)")
    parser.add_argument("--comment", default="", help="a word for the student, shown in their feedback pages")
    parser.add_argument("--by", metavar="NAME", help="who made the change (default: you@this-host)")


def _lab(args, stored) -> str:
    from autograde.layout import GradingError

    labs = sorted({entry.result.lab for entry in stored})
    if args.lab:
        if args.lab not in labs:
            raise GradingError(f"--lab {args.lab}: no results for it in {args.out}; labs there: {', '.join(labs) or 'none'}")
        return args.lab
    if len(labs) != 1:
        raise GradingError(f"--lab: {args.out} holds {len(labs)} labs ({', '.join(labs)}): say which")
    return labs[0]


def _event(args, result) -> dict:
    """The ledger event of this command, checked against the student's result (GradingError names the option)."""
    from autograde.due import DueError, parse_time
    from autograde.layout import GradingError

    base = dict(lab=result.lab, student=result.student, why=args.why, who=args.by,
                data={"comment": args.comment} if args.comment else {})
    cells = {f"{notebook.name}/{cell.grade_id}": cell for notebook in result.notebooks for cell in notebook.cells}
    if args.points is not None or args.clear == "cell":
        if not args.cell:
            raise GradingError("--cell NOTEBOOK/CELL: which cell (e.g. 01_tokenization/test_encode)")
        if args.cell not in cells:
            raise GradingError(f"--cell {args.cell}: not a test cell of {result.student}/{result.lab}; its cells: "
                               f"{', '.join(cells)}")
        notebook, cell = args.cell.split("/", 1)
        if args.clear:
            return {**base, "kind": "cell", "notebook": notebook, "cell": cell, "cleared": True}
        if not 0 <= args.points <= cells[args.cell].max_points:
            raise GradingError(f"--points {args.points:g}: between 0 and the cell's {cells[args.cell].max_points:g} "
                               "(points beyond it: --extra-credit)")
        if args.extra_credit < 0:
            raise GradingError(f"--extra-credit {args.extra_credit:g}: never negative (a penalty is --penalty)")
        return {**base, "kind": "cell", "notebook": notebook, "cell": cell, "value": args.points,
                "data": {**base["data"], "extra_credit": args.extra_credit}}
    if args.cell:
        raise GradingError("--cell goes with --points or --clear cell")
    if args.clear:
        return {**base, "kind": args.clear, "cleared": True}
    if args.score is not None:
        if not 0 <= args.score <= result.max_score:
            raise GradingError(f"--score {args.score:g}: between 0 and the lab's {result.max_score:g} points")
        return {**base, "kind": "score", "value": args.score}
    if args.penalty is not None:
        text = args.penalty.strip()
        try:
            amount = float(text.rstrip("%"))
        except ValueError:
            raise GradingError(f"--penalty {text}: points (5) or a percentage of the points possible (20%)") from None
        if amount < 0 or (text.endswith("%") and amount > 100):
            raise GradingError(f"--penalty {text}: between 0 and {'100%' if text.endswith('%') else 'the points possible'}")
        if text.endswith("%"):
            return {**base, "kind": "penalty", "value": round(result.max_score * amount / 100, 4),
                    "data": {**base["data"], "percent": amount}}
        return {**base, "kind": "penalty", "value": amount}
    try:
        due = parse_time(args.extension, "--extension ")
    except DueError as error:
        raise GradingError(str(error)) from None
    return {**base, "kind": "extension", "data": {**base["data"], "due": due.isoformat(timespec="seconds") + "+00:00"}}


def run(args) -> int:
    from autograde.final import final_grade
    from autograde.layout import GradingError
    from autograde.ledger import Ledger, LedgerError
    from autograde.out_folder import claim, held_by
    from autograde.outputs import rebuild_class_files
    from autograde.store import ResultStore

    try:
        if not (args.out / "results").is_dir():
            raise GradingError(f"{args.out} holds no results/ folder: give the --out folder of `course grade`")
        if not args.why.strip():
            raise GradingError("--why: say why (it is kept with the change, for the instructor)")
        store = ResultStore(args.out)
        stored, _ = store.all()
        lab = _lab(args, stored)
        entry = store.load(lab, args.student)
        if entry is None:
            students = sorted(e.result.student for e in stored if e.result.lab == lab)
            raise GradingError(f"{args.student}: no result for {lab} in {args.out}; students there: "
                               f"{', '.join(students[:15])}{' ...' if len(students) > 15 else ''}")
        ledger = Ledger(args.out)
        event = ledger.record(**_event(args, entry.result))
    except (GradingError, LedgerError) as error:
        print(f"course adjust: {error}", file=sys.stderr)
        return 1
    final = final_grade(entry, ledger.state())
    print(f"recorded event {event.seq} ({event.kind}) by {event.who} at {event.at}: {args.why}")
    print(f"{args.student}/{lab}: {final.score:g} of {final.max_score:g} (the autograder's: {final.auto_score:g}"
          + (f", late penalty {final.late_penalty:g}" if final.late_penalty else "") + ")")
    try:
        with claim(args.out, "course adjust"):
            rebuild_class_files(args.out)
    except GradingError:
        holder = held_by(args.out) or {}
        print(f"a `course grade` (process {holder.get('pid', '?')} on {holder.get('host', '?')}) is writing {args.out}: "
              "it applies this change when it rebuilds the class files")
        return 0
    print(f"rebuilt {args.out / 'grades.csv'}, report.json and the feedback pages")
    return 0
