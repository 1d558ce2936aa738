"""`course check`: run a notebook's visible tests in a fresh kernel; is it the file to hand in?"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from course_lib.handin.manifest import example_notebook

HELP = "Run a notebook's visible tests in a fresh kernel and say whether it is ready to hand in."
_LAB, _NOTEBOOK = example_notebook()
DESCRIPTION = f"""\
Run NOTEBOOK top to bottom in a fresh kernel (like JupyterLab's "Restart Kernel and Run All
Cells", on the saved file: save first) and print, per exercise, whether its visible tests
passed, failed (with the check's message: expected, got, hint) or were not attempted, and the
points its test cells are worth. A test cell with no visible check says "graded later with
hidden inputs": its points, shown in brackets, are decided only when your work is graded. A
written question (answered in words in a Markdown cell) says "graded by your TA", or "not
attempted" while its cell is as released: its points ("N TA") are given by your TA with a rubric
after you hand it in, and the total says "N points are graded by your TA". A worked example that
fails because of one of your answers is reported against that answer.
Then it says whether the file is the one to hand in: a name and a folder the grader expects
(<lab>/<notebook>.ipynb as released), valid notebook JSON, every test cell present and as
released, no copied graded cells. Several notebooks get a total at the end.

The visible tests are the ones in the notebook; grading also runs hidden tests with other
inputs, so passing here is necessary, not sufficient. Nothing is written next to the notebook:
the kernel runs in a scratch folder.

From a notebook cell:  from course_lib.handin import check_notebook; check_notebook("{_NOTEBOOK}.ipynb")

exit code: 0 when every file is ready to hand in, every visible test passes and no other cell that
runs your code fails; 1 otherwise.

examples:
  course check labs/{_LAB}/{_NOTEBOOK}.ipynb
  course check labs/{_LAB}/*.ipynb
  course check labs/{_LAB}/*.ipynb --json check.json     # also the reports as JSON
"""


def add_arguments(parser) -> None:
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK", help="the .ipynb file(s) to check")
    parser.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                        help="time limit per cell (default: 300)")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="also write the reports to FILE as JSON (a list, one report per notebook)")


def run(args) -> int:
    from course_lib.handin.check import Totals, check_notebook
    from course_lib.handin.manifest import load_manifest

    if args.timeout <= 0:
        print(f"course check: --timeout must be more than 0 seconds, got {args.timeout:g}", file=sys.stderr)
        return 2
    try:
        manifest = load_manifest()
    except FileNotFoundError as error:
        print(f"course check: {error}", file=sys.stderr)
        return 2
    status = 0
    reports = []
    for index, path in enumerate(args.notebooks):
        if index:
            print("\n" + "-" * 72 + "\n")
        if not path.is_file():
            print(f"course check: {path}: no such file", file=sys.stderr)
            status = 1
            continue
        report = check_notebook(path, timeout=args.timeout, manifest=manifest, progress=sys.stderr.isatty())
        if report is None:   # inside a check's own kernel: nothing was checked
            continue
        reports.append(report)
        if not (report.ready and report.all_passed):
            status = 1
    if len(reports) > 1:
        total = sum((report.totals for report in reports), Totals())
        ready = sum(report.ready for report in reports)
        print("\n" + "=" * 72)
        print(f"All {len(reports)} notebooks: {total.text()}; {ready} of {len(reports)} files ready to hand in.")
    if args.json:
        args.json.write_text(json.dumps([report.to_dict() for report in reports], indent=1) + "\n", encoding="utf-8")
    return status
