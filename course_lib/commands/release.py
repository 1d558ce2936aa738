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
release students open). With --check nothing is written: the command fails, naming the
notebook and cell, when the committed labs/ differ from what would be generated.

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


def run(args) -> int:
    from tqdm import tqdm

    from course_lib.grading.demo import sync_demo_submissions
    from course_lib.grading.layout import GradingError, find_repo_root, resolve_labs
    from course_lib.grading.release import release_labs

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
