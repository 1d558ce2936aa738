"""`course kit`: the folder an instructor publishes to students."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Build the student kit: the release notebooks and the student edition of course_lib."
DESCRIPTION = """\
Build the folder an instructor publishes to students (a git repository of its own, or a zip):

  OUT/labs/<lab>/*.ipynb     the release notebooks of the labs chosen with --labs (default: all)
  OUT/course_lib/            the student edition of the library: the reference answers of every
                             locked lab replaced by stubs that name the notebook and exercise where
                             the student writes them, plus the recorded results the visible tests
                             compare with (the kit has no reference to compute them)
  OUT/pyproject.toml, OUT/Makefile (`make setup`, `make lab`), OUT/README.md for students

Every lab is locked unless --unlock names it (do that once a lab is past due: later labs build on
its answers). A lab whose notebooks run on a locked lab's answers cannot go in: the build stops
and names the --unlock that fixes it. Before it finishes, the build searches every file of the
kit for code of a locked reference or solution cell and refuses a kit that contains any.
No solutions/, hidden tests, demo submissions or grading workspace ever go in.

examples:
  course kit --out ../kit                                  # all labs, everything locked
  course kit --out ../kit --labs lab02-prefill-vs-decode --unlock lab01-text-to-tensors
  course kit --out ../kit --zip                            # also writes ../kit.zip
"""


def add_arguments(parser) -> None:
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder to write the kit into (must be empty or not exist, unless --force)")
    parser.add_argument("--labs", nargs="+", metavar="LAB", help="labs whose notebooks go in (default: all)")
    parser.add_argument("--unlock", nargs="+", metavar="LAB", default=[],
                        help="labs past due: their reference answers ship in the kit")
    parser.add_argument("--zip", action="store_true", help="also write DIR.zip")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out folder")


def run(args) -> int:
    from course_lib.grading.kit import build_kit
    from course_lib.grading.layout import GradingError, find_repo_root

    try:
        kit = build_kit(find_repo_root(), args.out, labs=args.labs, unlock=args.unlock, archive=args.zip,
                        force=args.force)
    except GradingError as error:
        print(f"course kit: {error}", file=sys.stderr)
        return 1
    print(f"Student kit written to {kit.folder}")
    print(f"  labs:     {', '.join(kit.labs)}")
    print(f"  locked:   {', '.join(kit.locked) or 'none'} ({kit.stubbed} reference definitions stubbed)")
    print(f"  unlocked: {', '.join(kit.unlocked) or 'none'}")
    print("  checked:  no code of a locked reference or solution cell anywhere in the kit")
    if kit.archive:
        print(f"  archive:  {kit.archive}")
    return 0
