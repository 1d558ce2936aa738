"""`course export`: the grades of an output folder as a Canvas import file or a CSV."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Export the grades of a `course grade` output folder for an LMS (Canvas) or a spreadsheet."
DESCRIPTION = """\
Read the results `course grade` kept in OUT (OUT/results/<lab>/<student>.json) with OUT's ledger
applied (scores changed with `course adjust` or in formgrader, penalties, extensions, the late
penalty: formgrader's manual scores in OUT/gradebook.db are read into the ledger first) and write:

  --format canvas   a Canvas gradebook import file: Student, ID, SIS User ID, SIS Login ID,
                    Section, one column per lab, and a "Points Possible" row. Name each lab's
                    column after your assignment in Canvas (--assignment LAB=NAME, NAME its title
                    or id as in Canvas's gradebook export): a column Canvas does not know becomes a
                    new assignment. With the roster (--roster, Canvas: Grades > Export > Export
                    Entire Gradebook; by default the one `course grade --roster` kept in OUT) each
                    student id is matched to the roster's SIS Login ID, SIS User ID or ID and the row
                    filled in from it; hand-ins from Canvas's download carry the uploader's ID.
                    Import it in Canvas: Grades > Import.
  --format csv      one row per student, lab and notebook: score, max_score, skipped_points, status.
  --format wide     one row per student, one column per lab (the final score): for Moodle's or
                    Gradescope's CSV import, which map columns by hand.

A grading that did not finish gets an empty cell (never a zero) and is listed; so does a roster
student who handed in nothing (--missing zero gives them 0). A lab whose written answers still await
a TA (`course mark`) is not graded yet: its cell is left empty (Canvas shows it as ungraded, never as
a low grade) and the notes say how many answers await a TA per lab; --partial writes the score
without those answers instead, each one listed as PARTIAL. Renamed notebooks, identity
conflicts and labs graded on more than one version of the tests are listed too: check them
before you import.

examples:
  course export grades/ --format canvas --assignment lab01-text-to-tensors="Lab 1" --out canvas_import.csv
  course export grades/ --format canvas --roster canvas_gradebook.csv --assignment lab01-text-to-tensors=12345 \\
                        --out canvas_import.csv
  course export grades/ --format csv --out notebooks.csv
"""


def add_arguments(parser) -> None:
    parser.add_argument("results", type=Path, metavar="OUT", help="the --out folder of `course grade`")
    parser.add_argument("--format", choices=("canvas", "csv", "wide"), required=True, help="what to write")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the file to write")
    parser.add_argument("--roster", type=Path, metavar="CANVAS_EXPORT.csv",
                        help="(canvas) the gradebook exported from Canvas, to match students and fill in names "
                             "(default: OUT/roster.csv, kept by `course grade --roster`)")
    parser.add_argument("--assignment", action="append", metavar="LAB=NAME",
                        help="(canvas) the Canvas assignment a lab's grades go to: its title or id as in Canvas's "
                             "gradebook (Lab 1, 12345, or 'Lab 1 (12345)'); repeat per lab")
    parser.add_argument("--missing", choices=("empty", "zero"), default="empty",
                        help="(canvas) roster students with no graded hand-in: an empty cell (default: Canvas keeps "
                             "what it has) or 0")
    parser.add_argument("--lab", action="append", metavar="LAB", help="export only this lab (repeatable)")
    parser.add_argument("--partial", action="store_true",
                        help="(canvas, wide) write the scores of labs whose written answers still await a TA, "
                             "without those answers' points (default: an empty cell, which the LMS reads as not "
                             "graded yet)")


def _assignments(values: list[str] | None, labs: list[str]) -> dict[str, str]:
    from autograde.layout import GradingError

    mapping = {}
    for value in values or []:
        lab, sep, name = value.partition("=")
        if not sep or not name.strip():
            raise GradingError(f"--assignment {value}: expected LAB=NAME, e.g. {labs[0] if labs else 'lab01-...'}=\"Lab 1\"")
        if lab not in labs:
            raise GradingError(f"--assignment {value}: no results for {lab!r} here; labs: {', '.join(labs) or 'none'}")
        mapping[lab] = name.strip()
    return mapping


def run(args) -> int:
    from autograde.export import canvas_csv, notebook_csv, wide_csv
    from autograde.final import final_grades
    from autograde.layout import GradingError
    from autograde.ledger import Ledger
    from autograde.lms import read_roster
    from autograde.outputs import sync_formgrader
    from autograde.report import version_warnings
    from autograde.store import ResultStore, atomic_write_bytes

    notes: list[str] = []
    try:
        if not (args.results / "results").is_dir():
            raise GradingError(f"{args.results} holds no results/ folder: give the --out folder of `course grade`")
        if args.format != "canvas" and (args.roster or args.assignment):
            raise GradingError("--roster and --assignment are for --format canvas")
        if args.format == "csv" and args.partial:
            raise GradingError("--partial is for --format canvas and wide (the csv format has an awaiting_ta column)")
        ledger = Ledger(args.results)
        notes += sync_formgrader(args.results, ledger)
        stored, unreadable = ResultStore(args.results).all()
        known = sorted({entry.result.lab for entry in stored})
        if args.lab:
            unknown = [lab for lab in args.lab if lab not in known]
            if unknown:
                raise GradingError(f"--lab {', '.join(unknown)}: no results for it in {args.results}; "
                                   f"labs there: {', '.join(known) or 'none'}")
            stored = [entry for entry in stored if entry.result.lab in args.lab]
        if not stored:
            raise GradingError(f"no results in {args.results / 'results'}")
        finals = final_grades(stored, ledger.state())
        notes += [f"warning: {line}" for line in version_warnings(stored)]
        if args.format == "canvas":
            roster_path = args.roster or (args.results / "roster.csv" if (args.results / "roster.csv").is_file() else None)
            roster = read_roster(roster_path) if roster_path else None
            if roster_path and not args.roster:
                notes.append(f"roster: {roster_path} (kept by `course grade --roster`)")
            export = canvas_csv(stored, finals, roster, assignments=_assignments(args.assignment, known),
                                missing_as_zero=args.missing == "zero", partial=args.partial)
        elif args.format == "wide":
            export = wide_csv(stored, finals, partial=args.partial)
        else:
            export = notebook_csv(stored, finals)
        atomic_write_bytes(args.out, export.text.encode("utf-8"))
    except GradingError as error:
        print(f"course export: {error}", file=sys.stderr)
        return 1
    for note in [*notes, *unreadable, *export.notes]:
        print(f"note: {note}", file=sys.stderr)
    if args.partial and any(note.startswith("PARTIAL:") for note in export.notes):
        print("WARNING: --partial: scores without the written answers that await a TA are in the file; the LMS "
              "will show them as grades", file=sys.stderr)
    rows = export.text.count("\n") - (2 if args.format == "canvas" else 1)
    print(f"wrote {args.out} ({rows} rows, {args.format})")
    return 0
