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

Marks are saved the moment a TA saves them, in OUT/marking/marks.sqlite with every earlier version
(who, when, what changed), so the session can be stopped and started again. Several TAs can grade at
once, in one browser each (the same address) or each with their own `course mark` on the same OUT:
an answer a TA has open is claimed for --lease seconds (renewed while open), so no two TAs grade it,
and a mark is only saved over the version its TA saw; otherwise the page says who saved what.

The address printed holds a key (after #token=) that every request must carry: share it only with
your TAs. The server listens on 127.0.0.1 (this machine) unless --host says otherwise; TAs on other
machines can reach it through `ssh -L PORT:127.0.0.1:PORT` to this one.

examples:
  course mark grades/ --lab lab02-prefill-vs-decode
  course mark grades/ --lab lab02-prefill-vs-decode --anonymous --port 8765 --grader "Ada L."
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
                        help="the folder of <lab>.toml question files (default: the course's autograde/knowledge)")
    parser.add_argument("--open", action="store_true", help="open the page in this machine's browser")


def run(args) -> int:
    from autograde.knowledge.questions import KNOWLEDGE_DIR, RubricError, labs_with_questions, load_lab
    from autograde.marking.answers import students
    from autograde.marking.server import MarkingServer
    from autograde.marking.session import marking_dir, open_session

    questions_dir = args.questions or KNOWLEDGE_DIR
    try:
        if not (args.results / "autograded").is_dir():
            raise ValueError(f"{args.results} holds no autograded/ folder: give the --out folder of `course grade`")
        questions = load_lab(args.lab, questions_dir)
        if not questions.questions:
            known = ", ".join(labs_with_questions(questions_dir)) or "none"
            raise ValueError(f"--lab {args.lab}: no written questions for it in {questions_dir}; labs with some: {known}")
        if not students(args.results, args.lab):
            raise ValueError(f"--lab {args.lab}: nobody's graded notebooks of it in {args.results / 'autograded'}; "
                             "grade the lab first (course grade ... --lab LAB)")
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be 0 to 65535, got {args.port}")
        if not 10 <= args.lease <= 24 * 3600:
            raise ValueError(f"--lease must be 10 to 86400 seconds, got {args.lease:g}")
        app = open_session(args.results, args.lab, anonymous=args.anonymous, questions=questions,
                           lease_s=args.lease, default_grader=args.grader)
        server = MarkingServer(app, args.host, args.port)
    except (ValueError, RubricError, OSError) as error:
        print(f"course mark: {error}", file=sys.stderr)
        return 1

    summary = app.summary()
    awaiting = sum(question["progress"]["awaiting"] for question in summary["questions"])
    print(f"{args.lab}: {len(summary['questions'])} written questions, {summary['students']} students, "
          f"{awaiting} answers await a mark" + (" (anonymous)" if args.anonymous else ""))
    if not server.loopback_only():
        print(f"note: listening on {args.host}: anyone who can reach this machine and has the address below "
              "can grade", file=sys.stderr)
    print(f"marks: {marking_dir(args.results) / 'marks.sqlite'}")
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
    print("stopped; marks kept in", marking_dir(args.results) / "marks.sqlite")
    return 0
