"""`course check`: run a notebook's visible tests in a fresh kernel; is it the file to hand in?"""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Run a notebook's visible tests in a fresh kernel and say whether it is ready to hand in."
DESCRIPTION = """\
Run NOTEBOOK top to bottom in a fresh kernel (like JupyterLab's "Restart Kernel and Run All
Cells", on the saved file: save first) and print, per exercise, whether its visible tests
passed, failed (with the check's message: expected, got, hint) or were not attempted, and the
points its test cells are worth. Then say whether the file is the one to hand in: a name and a
folder the grader expects (<lab>/<notebook>.ipynb as released), valid notebook JSON, every test
cell present and as released, no copied graded cells.

The visible tests are the ones in the notebook; grading also runs hidden tests with other
inputs, so passing here is necessary, not sufficient. Nothing is written next to the notebook:
the kernel runs in a scratch folder.

From a notebook cell:  from course_lib.handin import check_notebook; check_notebook("04_paging.ipynb")

exit code: 0 when the file is ready to hand in and every visible test passes, 1 otherwise.

examples:
  course check labs/lab01-text-to-tensors/04_paging.ipynb
  course check labs/lab01-text-to-tensors/*.ipynb
"""


def add_arguments(parser) -> None:
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK", help="the .ipynb file(s) to check")
    parser.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                        help="time limit per cell (default: 300)")


def run(args) -> int:
    from course_lib.handin.check import check_notebook
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
    for index, path in enumerate(args.notebooks):
        if index:
            print("\n" + "-" * 72 + "\n")
        if not path.is_file():
            print(f"course check: {path}: no such file", file=sys.stderr)
            status = 1
            continue
        report = check_notebook(path, timeout=args.timeout, manifest=manifest, progress=sys.stderr.isatty())
        if report is not None and not (report.ready and report.all_passed):   # None: inside a check's kernel
            status = 1
    return status
