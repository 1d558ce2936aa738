"""`course grade`: autograde a folder of submissions."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Autograde a folder of submissions and write grades, feedback and a report."
DESCRIPTION = """\
Autograde every submission in SUBMISSIONS, laid out as

    SUBMISSIONS/<student>/<lab>/<notebook>.ipynb     (optionally <lab>/timestamp.txt)

Students are registered from the folder names. Each submission is graded by nbgrader in a
grading workspace outside git, in a process of its own: a notebook that loops forever loses
only the cells that hang (each cell has --timeout seconds), one that kills its kernel is
graded as far as it got, a malformed notebook scores zero with a clear message, and none of
them stops the others. Test cells a student edited or deleted are restored from solutions/
first; warnings printed to stderr never cost points; checks that need a GPU are reported as
"skipped: needs a GPU" on a CPU and left out of max_score (Triton code runs under
TRITON_INTERPRET=1 there).

Writes, in --out:
  grades.csv          nbgrader's export columns (assignment, student_id, score, max_score, ...)
  report.json         every cell's points and the reason for every lost point
  feedback/<student>/<lab>/<notebook>.html   per-student feedback, hidden tests removed
and prints the score table. Exit code 0 when grading completed, whatever the scores.

examples:
  course grade submissions/ --out grades/
  course grade submissions/ --lab lab01-text-to-tensors --timeout 300
"""


def add_arguments(parser) -> None:
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                        help="folder holding <student>/<lab>/<notebook>.ipynb")
    parser.add_argument("--lab", help="grade only this lab (default: every lab found)")
    parser.add_argument("--out", type=Path, default=Path("grading"),
                        help="where grades.csv, report.json and feedback/ go (default: ./grading)")
    parser.add_argument("--timeout", type=int, default=120, metavar="SECONDS",
                        help="time limit per notebook cell in seconds (default: 120)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="grade N submissions at once, each in its own workspace (default: 1)")
    parser.add_argument("--solutions", type=Path, help="nbgrader source folder (default: <repo>/solutions)")
    parser.add_argument("--workspace", type=Path,
                        help="grading workspace to use and keep (default: a temporary folder, removed afterwards)")


def run(args) -> int:
    import tempfile

    from tqdm import tqdm

    from course_lib.grading.autograde import grade
    from course_lib.grading.layout import GradingError, find_repo_root, gpu_available, list_labs
    from course_lib.grading.report import one_line_summary, score_table, write_outputs
    from course_lib.grading.sandbox import detect_isolation

    for name, value in (("--timeout", args.timeout), ("--jobs", args.jobs)):
        if value < 1:
            print(f"course grade: {name} must be at least 1, got {value}", file=sys.stderr)
            return 2
    try:
        solutions_dir = (args.solutions or find_repo_root() / "solutions").resolve()
        known_labs = list_labs(solutions_dir)
        if args.lab and args.lab not in known_labs:
            raise GradingError(f"unknown lab {args.lab!r}; labs in {solutions_dir}: {', '.join(known_labs) or 'none'}")
        device = "GPU" if gpu_available() else "CPU (GPU-only checks are skipped; Triton runs interpreted)"
        print(f"Grading {args.submissions} on the {device}; per-cell limit {args.timeout} s", file=sys.stderr)
        isolation = detect_isolation()
        print(f"Student kernels: {isolation.description}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="course-grading-") as scratch, \
                tqdm(desc="grading", unit="submission", file=sys.stderr, disable=None) as bar:
            def on_progress(submission, result):
                if result is None:
                    bar.set_postfix_str(f"{submission.student}/{submission.lab}")
                else:
                    bar.update(1)

            results, problems, _ = grade(
                args.submissions.resolve(), args.out.resolve(), solutions_dir=solutions_dir,
                known_labs=known_labs, only_lab=args.lab, timeout=args.timeout,
                workspace_dir=(args.workspace or Path(scratch)).resolve(), jobs=args.jobs,
                on_progress=on_progress)
        grades_path, report_path = write_outputs(args.out, results, problems, device=device, timeout=args.timeout)
    except GradingError as error:
        print(f"course grade: {error}", file=sys.stderr)
        return 1

    print(score_table(results))
    if results:
        print("\n" + one_line_summary(results))
    for problem in problems:
        print(f"not graded: {problem}")
    print(f"\ngrades:   {grades_path}\nreport:   {report_path}\nfeedback: {args.out / 'feedback'}")
    return 0
