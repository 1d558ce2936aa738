"""`course grade`: autograde a folder of submissions."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Autograde a folder of submissions and write grades, feedback and a report."
DESCRIPTION = """\
Autograde every submission in SUBMISSIONS, laid out as

    SUBMISSIONS/<student>/<lab>/<notebook>.ipynb     (optionally <lab>/timestamp.txt)

SUBMISSIONS may also be a zip made by `course submit --zip` (the same layout inside), or a folder
of such zips: they are unpacked into --out/unpacked first, each refused whole (and reported) if
an entry has an absolute path, a '..' part, a link, or is too large; of two hand-ins of one
student's lab, the later one is graded.

Students are registered from the folder names. Each submission is graded by nbgrader in a
grading workspace outside git, in a process of its own: a notebook that loops forever loses
only the cells that hang (each cell has --timeout seconds), one that kills its kernel is
graded as far as it got, a malformed notebook scores zero with a clear message, and none of
them stops the others. Test cells a student edited or deleted are restored from solutions/
first; warnings printed to stderr never cost points; checks that need a GPU are reported as
"skipped: needs a GPU" on a CPU and left out of max_score (Triton code runs under
TRITON_INTERPRET=1 there).

Each notebook runs in a kernel with limits (autograder.io's defaults: 4 GB of memory, 512
processes): memory, processes, CPU time, file size, disk (the working folder and /tmp), the
notebook's wall time and the output a cell keeps. `course grade` prints them and how this machine
enforces each; --limits changes them (key=value pairs, or a file of `key = value` lines):

    --limits memory=2GB,processes=256,cpu=30m,file=512MB,disk=2GB,notebook=20m,output=4MB,stream=200KB
    --limits grader_memory=12GB,grader_cpu=20m

A kernel that passes a limit loses the cells it was running, with the reason in its feedback
("memory limit of 4 GB reached"); every other submission is graded as usual.

The test cells run in the grader, against the student's objects in the kernel, so the grading
process has limits of its own, printed beside the kernel's: grader_memory (its data limit: a check
that passes it fails that test cell, "the grader's memory limit of 8 GB was reached") and
grader_cpu (CPU seconds per test cell: past it the system ends the grading process, and that
submission alone is reported as not graded, with the reason). Every value a kernel sends the
grader is bounded on receipt too (docs/trust-model.md): a range, list or string far larger than
any check needs fails its cell with a sentence that says so.

Grading runs on Dask: --jobs N starts N local worker processes (one submission each at a
time); --cluster tcp://HOST:PORT uses a scheduler you started (`dask scheduler`, then
`dask worker tcp://HOST:PORT --nworkers 2 --nthreads 1` on each lab machine, with
`--resources GPU=1` on a machine with a GPU: labs with GPU-only checks are sent there). Every
worker must have this same version of the course installed; the grader checks first.

Writes, in --out, each result the moment it is graded:
  results/<lab>/<student>.json               one per submission (what --resume reads)
  feedback/<student>/<lab>/<notebook>.html   per-student feedback, hidden tests removed
  autograded/<student>/<lab>/<notebook>.ipynb
and at the end, from those files:
  grades.csv          nbgrader's export columns (assignment, student_id, score, max_score, ...)
  report.json         every cell's points and the reason for every lost point
  gradebook.db        one nbgrader gradebook (open --out in formgrader for manual review)
and prints the score table. `course export` turns the results into a Canvas import file.
Exit code 0 when grading completed, whatever the scores; 1 on an error (nothing half-written).

examples:
  course grade submissions/ --out grades/ --jobs 2
  course grade submissions/ --out grades/ --resume                  # after a stop: only what is left
  course grade submissions/ --out grades/ --student alice           # regrade one student
  course grade submissions/ --out grades/ --cluster tcp://10.0.0.5:8786
  course grade autograde/demo_submissions --out grading/demo-all --demo-specs autograde/demo
                                                 # make demo-all: every demo student against its spec
"""


def add_arguments(parser) -> None:
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                        help="folder holding <student>/<lab>/<notebook>.ipynb, or zips of that (course submit --zip)")
    parser.add_argument("--lab", help="grade only this lab (default: every lab found)")
    parser.add_argument("--student", metavar="ID",
                        help="grade only this student (the other students' results are left as they are)")
    parser.add_argument("--out", type=Path, default=Path("grading"),
                        help="where results/, feedback/, grades.csv, report.json, gradebook.db go (default: ./grading)")
    parser.add_argument("--timeout", type=int, default=120, metavar="SECONDS",
                        help="time limit per notebook cell in seconds (default: 120)")
    parser.add_argument("--limits", action="append", metavar="KEY=VALUE,...|FILE",
                        help="the kernels' limits: memory, processes, cpu, file, disk, notebook, output, stream, and "
                             "the grading process's: grader_memory, grader_cpu (default: memory=4GB,processes=512,"
                             "cpu=20m,file=1GB,disk=1GB,notebook=15m,output=2MB,stream=100KB,grader_memory=8GB,"
                             "grader_cpu=10m); a FILE holds one key = value per line")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="local Dask worker processes, each grading one submission at a time (default: 1)")
    parser.add_argument("--cluster", metavar="tcp://HOST:PORT",
                        help="grade on the workers of this Dask scheduler instead of local ones")
    parser.add_argument("--resume", action="store_true",
                        help="skip submissions already graded in --out from the same files, lab and grader")
    parser.add_argument("--connect-timeout", type=float, default=10, metavar="SECONDS",
                        help="how long to try to reach the --cluster scheduler (default: 10)")
    parser.add_argument("--due", action="append", metavar="[LAB=]WHEN",
                        help="the due time of every lab (WHEN) or of one (LAB=WHEN; repeat for several), ISO 8601, "
                             "UTC unless it names a zone: grades.csv, report.json, the gradebook and the table then "
                             "say how late each hand-in is by its timestamp.txt (the student's claim, not a receipt)")
    parser.add_argument("--solutions", type=Path, help="nbgrader source folder (default: <repo>/solutions)")
    parser.add_argument("--demo-specs", type=Path, metavar="DIR",
                        help="after grading, compare every demo student with its spec in DIR/<lab>/<student>.py "
                             "(correct: full marks, blank: 0, others: EXPECTED) and exit 1 on a mismatch")


def run(args) -> int:
    from autograde.dispatch import GradeRun, gpu_cells_skipped, grade
    from autograde.due import CLAIM, DueError, hand_in, parse_due
    from autograde.grader_limits import grader_enforcement
    from autograde.layout import GradingError, find_repo_root, list_labs
    from autograde.outputs import write_class_outputs
    from autograde.report import one_line_summary, score_table
    from autograde.unpack import has_zips
    from course_lib.runner.limits import LimitsError, parse_limits
    from course_lib.runner.sandbox import detect_isolation
    from course_lib.runner.watchdog import enforcement

    for name, value in (("--timeout", args.timeout), ("--jobs", args.jobs), ("--connect-timeout", args.connect_timeout)):
        if value <= 0 or (name != "--connect-timeout" and value < 1):
            print(f"course grade: {name} must be at least 1, got {value:g}", file=sys.stderr)
            return 2
    try:
        limits = parse_limits(args.limits)
    except LimitsError as error:
        print(f"course grade: {error}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    refused_zips: list[str] = []
    try:
        if has_zips(args.submissions):
            args.submissions, refused_zips = _unpack(args.submissions, out)
        solutions_dir = (args.solutions or find_repo_root() / "solutions").resolve()
        known_labs = list_labs(solutions_dir)
        if args.lab and args.lab not in known_labs:
            raise GradingError(f"unknown lab {args.lab!r}; labs in {solutions_dir}: {', '.join(known_labs) or 'none'}")
        try:
            due = parse_due(args.due, known_labs)
        except DueError as error:
            raise GradingError(str(error)) from None
        where = args.cluster or f"{args.jobs} local worker{'s' if args.jobs > 1 else ''}"
        print(f"Grading {args.submissions} on {where}; per-cell limit {args.timeout} s", file=sys.stderr)
        isolation = detect_isolation()
        print(f"Student kernels: {isolation.description}", file=sys.stderr)
        own_user = isolation.name != "none" and _can_switch_user()
        print(f"Limits per kernel: {limits.summary()}", file=sys.stderr)
        if due:
            when = [f"every lab {due.default:%Y-%m-%d %H:%M} UTC"] if due.default else []
            when += [f"{lab} {time:%Y-%m-%d %H:%M} UTC" for lab, time in sorted(due.by_lab.items())]
            print(f"Due: {'; '.join(when)} (hand-in times are read from {CLAIM})", file=sys.stderr)
        for line in enforcement(limits, sandbox=isolation.name, own_user=own_user):
            print(f"  {line}", file=sys.stderr)
        print(f"Limits of the grading process (test cells run there): {limits.grader_summary()}", file=sys.stderr)
        for line in grader_enforcement(limits):
            print(f"  {line}", file=sys.stderr)

        def on_start(run) -> None:
            gpus = sum(worker.gpu for worker in run.workers)
            print(f"Workers: {len(run.workers)} ready ({run.cluster}), {gpus} with a GPU; "
                  f"{run.total - run.resumed} to grade" + (f", {run.resumed} already graded (--resume)"
                                                          if run.resumed else ""), file=sys.stderr)

        run, finished = GradeRun(), False
        try:
            grade(args.submissions.resolve(), out, solutions_dir=solutions_dir, known_labs=known_labs,
                        only_lab=args.lab, only_student=args.student, timeout=args.timeout, jobs=args.jobs,
                        cluster=args.cluster, resume=args.resume, connect_timeout=args.connect_timeout,
                        on_start=on_start, run=run, limits=limits)
            finished = True
        finally:
            # Whatever stopped the run (an error, Ctrl-C), the class files are rebuilt from the results kept.
            if (out / "results").is_dir() and (finished or run.graded or run.failed):
                problems = run.discovery_problems + run.problems
                device = ("GPU workers for GPU-only checks" if run.gpu_route
                          else "CPU (GPU-only checks are skipped; Triton runs interpreted)")
                outputs = write_class_outputs(out, solutions_dir, problems=problems, device=device,
                                              timeout=args.timeout, limits=limits.as_dict(), due=due)
            else:
                outputs = None
    except GradingError as error:
        print(f"course grade: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ncourse grade: stopped; every finished result is kept in "
              f"{out / 'results'}: run again with --resume to go on", file=sys.stderr)
        return 130

    if run.interrupted:
        print(f"\ncourse grade: stopped; every finished result is kept in {out / 'results'} and the files below "
              "are built from them: run again with --resume to go on", file=sys.stderr)
    results = outputs.results if outputs else []
    print(score_table(results, due))
    claimed = [entry for entry in (hand_in(result, due) for result in results) if entry]
    if claimed:
        on_time = sum(entry["status"] == "on time by its claim" for entry in claimed)
        late = sum(entry["status"] == "late by its claim" for entry in claimed)
        print(f"\nhand-in times: {on_time} on time and {late} late by their timestamp.txt, "
              f"{len(claimed) - on_time - late} with none; each is the student's own claim, not a receipt: "
              "check late and disputed ones against your LMS's submission times")
    if results:
        print("\n" + one_line_summary(results))
    skipped_gpu = gpu_cells_skipped(results)
    summary = f"\ngraded {run.graded} of {run.total}"
    if run.resumed:
        summary += f", {run.resumed} already graded (--resume)"
    if run.failed:
        summary += f", {run.failed} failed"
    if skipped_gpu:
        summary += f"; {skipped_gpu} GPU-only test cells skipped (no GPU worker): left out of max_score"
    print(summary)
    for problem in refused_zips + run.discovery_problems:
        print(f"not graded: {problem}")
    for problem in run.problems + (outputs.notes if outputs else []):
        print(f"problem: {problem}")
    if outputs:
        print(f"\ngrades:    {outputs.grades}\nreport:    {outputs.report}\nfeedback:  {out / 'feedback'}"
              + (f"\ngradebook: {outputs.gradebook} (formgrader: open {out})" if outputs.gradebook else ""))
    if run.interrupted:
        return 130
    if args.demo_specs and outputs:
        return _compare_with_demo_specs(outputs.report, args.demo_specs)
    return 0


def _can_switch_user() -> bool:
    """Whether sandboxed kernels get a user id of their own here (root, with setpriv)."""
    import os
    import shutil

    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def _unpack(submissions: Path, out: Path) -> tuple[Path, list[str]]:
    """Unpack hand-in zips into out/unpacked: (the folder to grade, the zips refused). GradingError: the one zip given is refused."""
    from autograde.layout import GradingError
    from autograde.unpack import UnpackError, unpack_submissions

    try:
        unpacked = unpack_submissions(submissions, out / "unpacked")
    except UnpackError as error:
        raise GradingError(str(error)) from None
    print(f"Unpacked {unpacked.zips} zip{'s' if unpacked.zips != 1 else ''} into {unpacked.folder}"
          + (f"; refused {len(unpacked.refused)}" if unpacked.refused else ""), file=sys.stderr)
    for note in unpacked.notes:
        print(f"  note: {note}", file=sys.stderr)
    for refused in unpacked.refused:
        print(f"  refused: {refused}", file=sys.stderr)
    return unpacked.folder, unpacked.refused


def _compare_with_demo_specs(report_path: Path, specs_root: Path) -> int:
    """Print each demo student's expected and actual scores; 1 when any differ (make demo's verdict)."""
    import json

    from autograde.demos import compare_with_specs, spec_table

    if not specs_root.is_dir():
        print(f"course grade: --demo-specs {specs_root} is not a folder (expected autograde/demo)", file=sys.stderr)
        return 2
    rows = compare_with_specs(json.loads(report_path.read_text()), specs_root)
    print("\nDemo students against their specs:\n" + spec_table(rows))
    wrong = [row for row in rows if not row.ok]
    if not rows:
        print("course grade: --demo-specs: no graded student has a spec there", file=sys.stderr)
        return 1
    if wrong:
        print(f"\n{len(wrong)} of {len(rows)} demo notebooks score other than their spec says", file=sys.stderr)
        return 1
    print(f"\nall {len(rows)} demo notebooks score as their specs say")
    return 0
