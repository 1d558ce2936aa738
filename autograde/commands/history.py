"""`course history`: the ledger of an output folder, every event with who, when and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HELP = "List the ledger's events (gradings, people's changes, due times) with who, when and why."
DESCRIPTION = """\
Print OUT/ledger.sqlite, oldest first: every time a submission was graded (its score then, and the
version of the tests), every change people made (`course adjust`, formgrader's manual scores, TA
marks of written answers from `course mark` with the rubric criteria they ticked, and the release of
a lab's marks), and the due times and late rules `course grade` recorded. Nothing in it is ever
overwritten or deleted.

examples:
  course history grades/
  course history grades/ --student s1234567 --lab lab01-text-to-tensors
  course history grades/ --json > ledger.json
"""


def add_arguments(parser) -> None:
    parser.add_argument("out", type=Path, metavar="OUT", help="the --out folder of `course grade`")
    parser.add_argument("--student", help="only this student's events")
    parser.add_argument("--lab", help="only this lab's events")
    parser.add_argument("--json", action="store_true", help="JSON lines, one event each")


def _what(event) -> str:
    if event.kind == "cell":
        criteria = event.data.get("criteria")
        ticked = f" [{', '.join(f'{key} {value:g}' for key, value in criteria.items())}]" if criteria else ""
        return f"{event.notebook}/{event.cell}{ticked}"
    if event.kind in ("due", "extension"):
        return event.data.get("due", "")
    if event.kind == "late_rule":
        return event.data.get("rule", "")
    return ""


def run(args) -> int:
    from autograde.ledger import Ledger

    ledger = Ledger(args.out)
    if not ledger.exists():
        print(f"course history: {args.out} has no ledger ({ledger.path.name}): grade into it first", file=sys.stderr)
        return 1
    for event in ledger.events(lab=args.lab, student=args.student):
        if args.json:
            print(json.dumps(event.as_dict(), ensure_ascii=False))
            continue
        value = "cleared" if event.cleared else ("" if event.value is None else f"{event.value:g}")
        print(f"{event.seq:>5}  {event.at[:19]}  {event.who:<24}  {event.kind:<9}  {event.lab}  {event.student}  "
              f"{_what(event)}  {value}  {event.why}")
    return 0
