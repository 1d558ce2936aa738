"""`course submit`: your notebooks in the layout the grader reads, as a folder or a timestamped zip."""

from __future__ import annotations

import sys
from pathlib import Path

from course_lib.handin.manifest import example_notebook

HELP = "Pack your notebooks for handing in: <student>/<lab>/<notebook>.ipynb, as a folder or a zip."
_LAB, _ = example_notebook()
DESCRIPTION = f"""\
Copy your saved notebooks into the layout the grader reads:

    <student id>/<lab>/<notebook>.ipynb      (the release's names)
    <student id>/<lab>/timestamp.txt         (when you handed in, UTC)

as a folder (--out, default ./submission) or, with --zip, as one file named
<student id>-<UTC time>.zip (in --out, default the current folder). Nothing is handed in until you
upload that file where your course collects work; the grader accepts the zip as it is.

Which labs: those named with --lab, else every lab in which you changed an answer cell. Every
release notebook of those labs goes in. A notebook that is not valid notebook JSON stops the
hand-in (it would score zero); edited test cells, copied graded cells and missing notebooks are
listed (the grader puts the released test cells back). Save your notebooks in JupyterLab first,
and run `course check` on them to see their visible tests.

examples:
  course submit --student s1234567 --zip
  course submit --student s1234567 --lab {_LAB} --zip --out ~/handin
  course submit --student s1234567                          # the folder ./submission/s1234567/...
"""


def add_arguments(parser) -> None:
    parser.add_argument("--student", required=True, metavar="ID", help="your student id, as your course uses it")
    parser.add_argument("--lab", action="append", metavar="LAB",
                        help="a lab to hand in (repeatable; default: every lab whose answers you changed)")
    parser.add_argument("--zip", action="store_true", help="write one zip file instead of a folder")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="where to write (default: ./submission for a folder, . for a zip)")
    parser.add_argument("--labs-dir", type=Path, metavar="DIR",
                        help="the folder holding <lab>/<notebook>.ipynb (default: the kit's labs/)")


def _default_labs_dir() -> Path:
    import course_lib

    kit_labs = Path(course_lib.__file__).resolve().parent.parent / "labs"
    return kit_labs if kit_labs.is_dir() else Path("labs")


def run(args) -> int:
    from course_lib.handin.submit import SubmitError, plan_hand_in, write_folder, write_zip

    labs_dir = args.labs_dir or _default_labs_dir()
    try:
        hand_in = plan_hand_in(args.student, labs_dir, args.lab)
        written = write_zip(hand_in, args.out or Path(".")) if args.zip else \
            write_folder(hand_in, args.out or Path("submission"))
    except (SubmitError, FileNotFoundError) as error:
        print(f"course submit: {error}", file=sys.stderr)
        return 1
    for lab in hand_in.labs:
        names = [name for entry_lab, name, _ in hand_in.files if entry_lab == lab]
        print(f"{lab}: {len(names)} notebook{'s' if len(names) != 1 else ''} ({', '.join(names)})")
    for note in hand_in.notes:
        print(f"  note: {note}")
    print(f"\nPacked at {hand_in.timestamp()}: {written.resolve()}")
    if args.zip:
        print("Not handed in yet: upload this zip where your course collects work (it is what the grader reads).")
    else:
        print("Not handed in yet: hand in this folder the way your course collects work (or use --zip for one file).")
    return 0
