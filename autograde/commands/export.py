"""`course export`: the grades of an output folder as a Canvas import file or a per-notebook CSV."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Export the grades of a `course grade` output folder for an LMS (Canvas) or a spreadsheet."
DESCRIPTION = """\
Read the results `course grade` kept in OUT (OUT/results/<lab>/<student>.json) and write:

  --format canvas   a Canvas gradebook import file: Student, ID, SIS User ID, SIS Login ID,
                    Section, one column per lab, and a "Points Possible" row. With --roster
                    (Canvas: Grades > Export > Export Entire Gradebook), each student id (the
                    submission folder's name) is matched to the roster's SIS Login ID, SIS User
                    ID or ID and the row filled in from it; students not in the roster are left
                    out and listed. Import it in Canvas: Grades > Import.
  --format csv      one row per student, lab and notebook: score, max_score, skipped_points, status.

A submission whose grading failed gets an empty cell (never a zero) and is listed.

examples:
  course export grades/ --format canvas --roster canvas_gradebook.csv --out canvas_import.csv
  course export grades/ --format csv --out notebooks.csv
"""


def add_arguments(parser) -> None:
    parser.add_argument("results", type=Path, metavar="OUT", help="the --out folder of `course grade`")
    parser.add_argument("--format", choices=("canvas", "csv"), required=True, help="what to write")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the file to write")
    parser.add_argument("--roster", type=Path, metavar="CANVAS_EXPORT.csv",
                        help="(canvas) the gradebook exported from Canvas, to match students and fill in names")
    parser.add_argument("--lab", action="append", metavar="LAB", help="export only this lab (repeatable)")


def run(args) -> int:
    from autograde.export import canvas_csv, notebook_csv, read_roster
    from autograde.layout import GradingError
    from autograde.store import ResultStore, atomic_write_bytes

    try:
        if not (args.results / "results").is_dir():
            raise GradingError(f"{args.results} holds no results/ folder: give the --out folder of `course grade`")
        if args.roster and args.format != "canvas":
            raise GradingError("--roster is for --format canvas")
        stored, unreadable = ResultStore(args.results).all()
        if args.lab:
            known = sorted({entry.result.lab for entry in stored})
            unknown = [lab for lab in args.lab if lab not in known]
            if unknown:
                raise GradingError(f"--lab {', '.join(unknown)}: no results for it in {args.results}; "
                                   f"labs there: {', '.join(known) or 'none'}")
            stored = [entry for entry in stored if entry.result.lab in args.lab]
        if not stored:
            raise GradingError(f"no results in {args.results / 'results'}")
        if args.format == "canvas":
            export = canvas_csv(stored, read_roster(args.roster) if args.roster else None)
        else:
            export = notebook_csv(stored)
        atomic_write_bytes(args.out, export.text.encode("utf-8"))
    except GradingError as error:
        print(f"course export: {error}", file=sys.stderr)
        return 1
    for note in [*unreadable, *export.notes]:
        print(f"note: {note}", file=sys.stderr)
    rows = export.text.count("\n") - (2 if args.format == "canvas" else 1)
    print(f"wrote {args.out} ({rows} rows, {args.format})")
    return 0
