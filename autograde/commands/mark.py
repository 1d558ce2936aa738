"""`course mark`: grade the written answers of a lab, question by question, in a browser."""

from __future__ import annotations

import sys
import time
from pathlib import Path

HELP = "Grade written answers with their rubrics in a browser: one question at a time across the class."
DESCRIPTION = """\
Serve a page on this machine on which TAs grade the written answers of one lab, read from the
notebooks `course grade` kept in OUT/autograded/. One page per question: every student's answer
to it, the rubric beside it (criteria with their points and partial credit, the model answer, notes
for TAs), a comment for the student. Keys: j/k next/previous answer, n next answer awaiting a mark,
1-9 tick a criterion (again: its partial credit, then none), c comment, Enter save and next, ? all keys.

Every mark is saved the moment a TA saves it, into OUT/ledger.sqlite (the record of scores that
`course grade`, `course export`, formgrader's gradebook and the feedback all read; no regrade
erases it), with every earlier version (who, when, why), so the session can be stopped and started
again. Several TAs can grade at once, in one browser each (the same address) or each with their own
`course mark` on the same OUT: an answer a TA has open is claimed for --lease seconds (renewed while
open), so no two TAs grade it, and a mark is only saved over the version its TA saw; otherwise the
page says who saved what. When the server stops, grades.csv, report.json and the feedback pages are
rebuilt with the marks.

Students see nothing of the marks until you release them: --release records that in the ledger and
rebuilds the feedback pages, which then show each written answer's points, the rubric criteria it
met and the TA's comment (before that they say "N points are graded by your TA; marks appear here
once released"). Until every answered question has a mark, `course export` leaves the student's lab
empty (Canvas reads it as not graded yet) unless you pass it --partial.

The address printed holds a key (after #token=) that every request must carry: share it only with
your TAs. The server listens on 127.0.0.1 (this machine) unless --host says otherwise; TAs on other
machines can reach it through `ssh -L PORT:127.0.0.1:PORT` to this one.

examples:
  course mark grades/ --lab lab02-prefill-vs-decode
  course mark grades/ --lab lab02-prefill-vs-decode --anonymous --port 8765 --grader "Ada L."
  course mark grades/ --lab lab02-prefill-vs-decode --status        # what is marked, what awaits a TA
  course mark grades/ --lab lab02-prefill-vs-decode --release --why "graded by Ada and Bo"
"""


def add_arguments(parser) -> None:
    parser.add_argument("results", type=Path, metavar="OUT", help="the --out folder of `course grade`")
    parser.add_argument("--lab", required=True, metavar="LAB", help="the lab whose written answers to grade")
    parser.add_argument("--port", type=int, default=0, metavar="N",
                        help="the port to listen on (default: a free one, printed at start)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--anonymous", action="store_true",
                        help="hide student ids: answers are 'Answer 1', 'Answer 2'... in an order unrelated to the ids")
    parser.add_argument("--grader", default="", metavar="NAME",
                        help="your name on the marks (default: the page asks each TA once)")
    parser.add_argument("--lease", type=float, default=300.0, metavar="SECONDS",
                        help="how long an open answer stays claimed without activity (default 300)")
    parser.add_argument("--questions", type=Path, metavar="FOLDER",
                        help="the folder of <lab>.toml rubric files (default: the course's autograde/knowledge); "
                             "kept in OUT/class.json for the class files rebuilt later")
    parser.add_argument("--solutions", type=Path, metavar="FOLDER",
                        help="the solution notebooks holding the questions and model answers (default: the "
                             "folder `course grade` graded with, else the course's solutions/)")
    parser.add_argument("--open", action="store_true", help="open the page in this machine's browser")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true",
                        help="print each question's progress (marked, awaiting a TA, blank) and exit")
    action.add_argument("--release", action="store_true",
                        help="release the lab's marks to students: the feedback pages show them from now on")
    action.add_argument("--withdraw", action="store_true",
                        help="withdraw a release: the feedback pages hide the marks again")
    parser.add_argument("--why", default="", metavar="TEXT", help="(--release, --withdraw) kept with the event")


def _solutions(args) -> Path:
    import json

    from autograde.knowledge.questions import SOLUTIONS_DIR

    if args.solutions:
        return args.solutions
    try:
        recorded = json.loads((args.results / "class.json").read_text(encoding="utf-8")).get("solutions")
    except (OSError, ValueError):
        recorded = None
    return Path(recorded) if recorded and (Path(recorded) / args.lab).is_dir() else SOLUTIONS_DIR


def _remember_questions(args) -> None:
    """A rubric folder given with --questions is kept in OUT/class.json, so the class files that
    `course grade` and `course adjust` rebuild show the criteria's words too."""
    import json

    from autograde.store import atomic_write_bytes

    record_path = args.results / "class.json"
    if not args.questions or not record_path.is_file():
        return
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except ValueError:
        return
    if record.get("questions") != str(args.questions.resolve()):
        record["questions"] = str(args.questions.resolve())
        atomic_write_bytes(record_path, json.dumps(record, indent=1).encode())


def _progress_lines(summary: dict) -> list[str]:
    lines = []
    for question in summary["questions"]:
        progress = question["progress"]
        lines.append(f"  {question['key']:<55} {question['points']:>4g} pts  marked {progress['graded']:>3}  "
                     f"awaiting {progress['awaiting']:>3}  blank {progress['blank']:>3}  missing {progress['missing']:>3}")
    return lines


def _rebuild(args, command: str) -> str:
    from autograde.layout import GradingError
    from autograde.out_folder import claim, held_by
    from autograde.outputs import rebuild_class_files

    out = args.results
    if not (out / "results").is_dir():
        return f"{out} holds no results/ yet: `course grade` writes the class files with the marks"
    try:
        with claim(out, command):
            rebuild_class_files(out, questions_dir=args.questions, solutions_dir=args.solutions)
    except GradingError:
        holder = held_by(out) or {}
        return (f"a `course grade` (process {holder.get('pid', '?')} on {holder.get('host', '?')}) is writing {out}: "
                "it applies the marks when it rebuilds the class files")
    return f"rebuilt {out / 'grades.csv'}, report.json and the feedback pages"


def _release(args, app) -> int:
    from autograde.ledger import Ledger, LedgerError

    ledger = Ledger(args.results)
    current = ledger.state().released(args.lab)
    if args.release and current is not None:
        print(f"{args.lab}: already released (event {current.seq} by {current.who} at {current.at})")
    elif args.withdraw and current is None:
        print(f"{args.lab}: not released; nothing to withdraw")
    else:
        try:
            event = ledger.record("release", lab=args.lab, cleared=args.withdraw, who=args.grader or None,
                                  why=args.why or ("marks released" if args.release else "release withdrawn"))
        except LedgerError as error:
            print(f"course mark: {error}", file=sys.stderr)
            return 1
        print(f"{args.lab}: {'released' if args.release else 'release withdrawn'} (event {event.seq} by {event.who})")
    summary = app.summary()
    awaiting = sum(question["progress"]["awaiting"] for question in summary["questions"])
    if args.release and awaiting:
        print(f"note: {awaiting} answers still await a mark: their feedback says 'not graded yet' until a TA "
              "marks them, and `course export` leaves those students' lab empty (or --partial)")
    print(_rebuild(args, "course mark"))
    return 0


def run(args) -> int:
    from autograde.knowledge.questions import KNOWLEDGE_DIR, RubricError, labs_with_questions, load_lab
    from autograde.marking.answers import students
    from autograde.marking.server import MarkingServer
    from autograde.marking.session import open_session

    questions_dir = args.questions or KNOWLEDGE_DIR
    try:
        if not (args.results / "autograded").is_dir():
            raise ValueError(f"{args.results} holds no autograded/ folder: give the --out folder of `course grade`")
        questions = load_lab(args.lab, questions_dir, _solutions(args))
        if not questions.questions:
            known = ", ".join(labs_with_questions(questions_dir)) or "none"
            raise ValueError(f"--lab {args.lab}: no written questions for it in {questions_dir}; labs with some: {known}")
        if not students(args.results, args.lab):
            raise ValueError(f"--lab {args.lab}: nobody's graded notebooks of it in {args.results / 'autograded'}; "
                             "grade the lab first (course grade ... --lab LAB)")
        if args.why and not (args.release or args.withdraw):
            raise ValueError("--why goes with --release or --withdraw")
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be 0 to 65535, got {args.port}")
        if not 10 <= args.lease <= 24 * 3600:
            raise ValueError(f"--lease must be 10 to 86400 seconds, got {args.lease:g}")
        app = open_session(args.results, args.lab, anonymous=args.anonymous, questions=questions,
                           lease_s=args.lease, default_grader=args.grader)
        _remember_questions(args)
        if args.status or args.release or args.withdraw:
            server = None
        else:
            server = MarkingServer(app, args.host, args.port)
    except (ValueError, RubricError, OSError) as error:
        print(f"course mark: {error}", file=sys.stderr)
        return 1

    summary = app.summary()
    awaiting = sum(question["progress"]["awaiting"] for question in summary["questions"])
    print(f"{args.lab}: {len(summary['questions'])} written questions, {summary['students']} students, "
          f"{awaiting} answers await a mark" + (" (anonymous)" if args.anonymous else ""))
    if args.status:
        print("\n".join(_progress_lines(summary)))
        from autograde.ledger import Ledger

        released = Ledger(args.results).state().released(args.lab)
        print(f"marks released: {'yes (event %d by %s)' % (released.seq, released.who) if released else 'no'}")
        return 0
    if args.release or args.withdraw:
        return _release(args, app)
    if not server.loopback_only():
        print(f"note: listening on {args.host}: anyone who can reach this machine and has the address below "
              "can grade", file=sys.stderr)
    print(f"marks: {args.results / 'ledger.sqlite'}")
    print(f"open:  {server.url}")
    print("Ctrl-C stops the server (every saved mark is kept).", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(server.url)
    server.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    print(f"stopped; marks kept in {args.results / 'ledger.sqlite'}")
    print(_rebuild(args, "course mark"))
    return 0
