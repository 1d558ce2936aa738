"""`course kit`: the folder an instructor publishes to students."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Build the student kit: the release notebooks and the student edition of course_lib."
DESCRIPTION = """\
Build the folder an instructor publishes to students (a git repository of its own, or a zip):

  OUT/labs/<lab>/*.ipynb     the release notebooks of the kit's labs
  OUT/course_lib/            the student edition of the library: the reference answers of every
                             locked lab replaced by stubs that name the notebook and exercise where
                             the student writes them, plus the recorded results the visible tests
                             compare with (the kit has no reference to compute them)
  OUT/pyproject.toml, OUT/Makefile (`make setup`, `make lab`, `make update`), OUT/README.md for students
  OUT/KIT.json               the kit's labs and every file's checksum (how `make update` tells a
                             student's changes from the kit's)

A new kit for each deadline: build it into the same --out with --force. A kit that is a git
repository (--git once, or your own `git init`) keeps its history: each build is a new commit.
Students take it with `make update` (a git clone) or `make update KIT=path/to/kit.zip`: files they
did not change are updated, new labs added, and a notebook they changed is never overwritten.

Every lab is locked unless --unlock names it: do that once a lab is past due, since later labs
run on its answers (Labs 0.2 to 0.5 run on Lab 0.1's engine; Labs 0.3 to 0.5 also on Lab 0.2's).
Without --labs the kit holds every lab that can run with what is unlocked, and says which labs it
left out and what they need: with nothing unlocked that is Lab 0.1 alone (the start of term),
with Lab 0.1 unlocked Labs 0.1 and 0.2, with Labs 0.1 and 0.2 unlocked the whole course. A lab
named in --labs that runs on a locked lab is refused, with the --unlock that fixes it.

Before anything is written, the build searches every file of the kit for code that answers a
locked exercise (a locked reference, or a solution cell, beyond the code the release notebooks
give) and refuses a kit that contains any, naming the file and cell; a refused build leaves
nothing behind. No solutions/, hidden tests, demo submissions or grading workspace ever go in.

examples:
  course kit --out ../kit --git                            # start of term: Lab 0.1, everything locked
  course kit --out ../kit --force --unlock lab01-text-to-tensors   # after Lab 0.1's deadline: Labs 0.1, 0.2
  course kit --out ../kit --labs lab03-kernels --unlock lab01-text-to-tensors lab02-prefill-vs-decode
  course kit --out ../kit --zip --force                    # replace ../kit, and also write ../kit.zip
"""


def add_arguments(parser) -> None:
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder to write the kit into (must be empty or not exist, unless --force)")
    parser.add_argument("--labs", nargs="+", metavar="LAB",
                        help="labs whose notebooks go in (default: every lab that can run with what is unlocked)")
    parser.add_argument("--unlock", nargs="+", metavar="LAB", default=[],
                        help="labs past due: their reference answers ship in the kit")
    parser.add_argument("--zip", action="store_true", help="also write DIR.zip")
    parser.add_argument("--force", action="store_true",
                        help="replace a non-empty --out folder (only once the new kit passed every check); its git "
                             "history is kept and the new kit committed to it")
    parser.add_argument("--git", action="store_true",
                        help="make the kit a git repository (one commit per kit) if it is not one yet, to publish it "
                             "as one")


def run(args) -> int:
    from autograde.kit import build_kit
    from autograde.layout import GradingError, find_repo_root
    from course_lib.exercises import lab_title

    try:
        kit = build_kit(find_repo_root(), args.out, labs=args.labs, unlock=args.unlock, archive=args.zip,
                        force=args.force, git=args.git)
    except GradingError as error:
        print(f"course kit: {error}", file=sys.stderr)
        return 1
    print(f"Student kit written to {kit.folder}")
    print(f"  labs:     {', '.join(kit.labs)}")
    print(f"  locked:   {', '.join(kit.locked) or 'none'} ({kit.stubbed} reference definitions stubbed)")
    print(f"  unlocked: {', '.join(kit.unlocked) or 'none'}")
    if kit.left_out:
        print("  left out: " + "; ".join(
            f"{lab} (runs on {' and '.join(lab_title(need) for need in needs)})" for lab, needs in kit.left_out.items()))
        unlock_next = sorted({*kit.unlocked, *next(iter(kit.left_out.values()))})
        print(f"            once they are past due: course kit --out {args.out} --force --unlock {' '.join(unlock_next)}")
    print("  checked:  no code that answers a locked exercise anywhere in the kit")
    if kit.archive:
        print(f"  archive:  {kit.archive}")
    if kit.commit:
        print(f"  git:      commit {kit.commit[:12]} in {kit.folder} (push it where students clone the kit)")
    print("  students: `make update KIT=<this kit's folder or zip>` in their kit takes it without losing their "
          "work (in a git clone: `make update`)")
    return 0
