"""`course release`: nbgrader generate_assignment from solutions/ into labs/."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Generate the student release (labs/) from the solution notebooks (solutions/)."
DESCRIPTION = """\
Generate the student release of one lab or of all labs.

Runs nbgrader generate_assignment on solutions/<lab> (the nbgrader source: reference
answers between ### BEGIN/END SOLUTION, hidden tests between ### BEGIN/END HIDDEN TESTS)
in a scratch workspace, strips outputs and volatile metadata, and writes labs/<lab>/ (the
release students open) and the demo submissions (autograde/demo_submissions/).

Then it records the reference side of every visible test for the student kit: each release
notebook runs with the reference answers filled in, and what the checks asked of the course's
reference is saved in course_lib/checks/recorded/<lab>.json (the kit's visible tests replay it,
since the kit has no reference answers). Only labs whose notebooks or library modules changed
since their last recording are run again (minutes per lab); --no-record skips this step.

With --check nothing is written: the command fails, naming the notebook and cell, when the
committed labs/ or demo submissions differ from what would be generated, or a lab's recording
is missing or stale.

examples:
  course release                         # regenerate every lab
  course release lab01-text-to-tensors   # one lab
  course release --check                 # CI: is labs/ in sync with solutions/?
"""


def add_arguments(parser) -> None:
    parser.add_argument("lab", nargs="?", help="lab folder name, e.g. lab01-text-to-tensors (default: all labs)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed release instead of writing it; exit 1 on any difference")
    parser.add_argument("--solutions", type=Path, help="nbgrader source folder (default: <repo>/solutions)")
    parser.add_argument("--labs", type=Path, help="release folder (default: <repo>/labs)")
    parser.add_argument("--no-record", action="store_true",
                        help="do not re-record the kit's visible-test results (course_lib/checks/recorded/)")


def run(args) -> int:
    from tqdm import tqdm

    from autograde.demos import sync_demo_submissions
    from autograde.layout import GradingError, find_repo_root, resolve_labs
    from autograde.recording import stale_fixtures, stale_labs
    from autograde.release import release_labs

    try:
        root = find_repo_root() if not (args.solutions and args.labs) else Path.cwd()
        solutions_dir = (args.solutions or root / "solutions").resolve()
        labs_dir = (args.labs or root / "labs").resolve()
        labs = resolve_labs(solutions_dir, args.lab)
        with tqdm(total=len(labs), desc="release", unit="lab", file=sys.stderr, disable=None) as bar:
            differences = release_labs(solutions_dir, labs_dir, labs, check=args.check, display_root=root,
                                       progress=lambda lab: bar.update(1))
        if args.solutions is None and args.labs is None:
            differences += sync_demo_submissions(root, labs, check=args.check)
            if args.check:
                differences += stale_fixtures(root, labs)
            elif not args.no_record:
                _record(root, stale_labs(root, labs))
    except GradingError as error:
        print(f"course release: {error}", file=sys.stderr)
        return 1
    if args.check:
        if differences:
            print(f"The committed release is out of sync with solutions/ ({len(differences)} difference(s)):")
            for difference in differences:
                print(f"  {difference}")
            print("Run `course release` to regenerate it, then commit labs/.")
            return 1
        print(f"labs/ is in sync with solutions/ ({', '.join(labs)}).")
        return 0
    print(f"Released {len(labs)} lab(s) into {labs_dir}: {', '.join(labs)}")
    return 0


def _record(root: Path, labs: list[str]) -> None:
    """Record the visible tests of ``labs`` for the student kit, with a progress bar per notebook."""
    from tqdm import tqdm

    from autograde.recording import record_lab

    for lab in labs:
        notebooks = sorted((root / "solutions" / lab).glob("*.ipynb"))
        with tqdm(total=len(notebooks), desc=f"record {lab}", unit="notebook", file=sys.stderr,
                  disable=None) as bar:
            path = record_lab(root, lab, progress=lambda name: bar.update(1))
        print(f"Recorded the visible tests of {lab} for the student kit: {path.relative_to(root)}")
