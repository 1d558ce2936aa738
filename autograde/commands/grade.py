"""`course grade`: autograde a folder of submissions."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HELP = "Autograde a folder of submissions and write grades, feedback and a report."
DESCRIPTION = """\
Autograde every hand-in in SUBMISSIONS: a folder (or a zip) holding any mix of

    <student>/<lab>/<notebook>.ipynb     (optionally <lab>/timestamp.txt)
    <student>-<UTC time>.zip             made by `course submit --zip` (the same layout inside)
    an LMS's bulk download               Canvas: <name>[_LATE]_<user id>_<submission id>_<file>;
                                         Moodle: <Full Name>_<id>_assignsubmission_file_<file>

Every file and folder of SUBMISSIONS gets one line in the output and in report.json: graded (as
which student and lab), not graded with the reason (a .rar, a damaged or truncated zip, a notebook
with no student's name), or ignored with the reason. Zips are checked before anything is unpacked
(into --out/unpacked), each refused whole if an entry has an absolute path, a '..' part, a link, or
is too large. An LMS-named file is handed in by its uploader: with --roster the uploader's row names
the student, and a zip whose folder names someone else is graded as the uploader's and flagged; two
uploads that typed the same id stay two students, flagged. A zip with no LMS name hands in only for
the student its own name names. Notebooks outside a lab folder are graded as the lab whose chapters
they are, a renamed notebook (01_tokenization-Copy1.ipynb) as its chapter: both flagged. Of two
hand-ins of one student's lab, the later one is graded. With --roster, who handed in nothing and
which hand-ins match no student are listed. The run exits with 1 when nothing could be graded.

Students are registered by id (a folder name, or an LMS upload's student). Each submission is graded by nbgrader in a
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

Late work: --due LAB=WHEN (a time with a zone; a date alone is refused), --received (the LMS's
submission times: lateness then rests on the LMS's receipt, else on Canvas's _LATE mark, else on the
student's timestamp.txt, a claim), --late-penalty 10%/day,max=50%. Due times and the rule are kept
in --out's ledger for later runs; a student's own due time is `course adjust --extension`.

Writes, in --out, each result the moment it is graded:
  results/<lab>/<student>.json               one per submission (what --resume reads)
  feedback/<student>/<lab>/<notebook>.html   per-student feedback, hidden tests removed
  autograded/<student>/<lab>/<notebook>.ipynb
  instructor/<lab>/<student>.json            every lost point in full (`course why`): yours only
and at the end, from those files and the ledger (ledger.sqlite: `course adjust`, formgrader's manual
scores, due times, every grading; nothing in it is ever erased):
  grades.csv          nbgrader's export columns (assignment, student_id, raw_score, late_submission_penalty, ...)
  report.json         every SUBMISSIONS entry, every cell's points and the reason for every lost point
  gradebook.db        one nbgrader gradebook (open --out in formgrader for manual review)
and prints the score table. `course export` turns the results into a Canvas import file.
One run writes an --out at a time; a SUBMISSIONS other than the one(s) graded into --out before
needs --resume (the new hand-ins join that class). Results graded on an older version of the tests
are flagged; --resume regrades them.
Exit code 0 when grading completed, whatever the scores; 1 on an error or when nothing was graded.

examples:
  course grade submissions/ --out grades/ --jobs 2
  course grade submissions.zip --out grades/ --roster roster.csv --due 2026-12-01T23:59-05:00 \\
               --late-penalty 10%/day,max=50%           # a Canvas download, its class list, the deadline
  course grade submissions/ --out grades/ --resume                  # after a stop: only what is left
  course grade submissions/ --out grades/ --student alice           # regrade one student
  course grade submissions/ --out grades/ --cluster tcp://10.0.0.5:8786
  course grade autograde/demo_submissions --out grading/demo-all --demo-specs autograde/demo
                                                 # make demo-all: every demo student against its spec
"""


def add_arguments(parser) -> None:
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                        help="folder holding <student>/<lab>/<notebook>.ipynb, zips of that (course submit --zip), "
                             "an LMS's download of them, or one zip of any of these")
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
                        help="skip submissions already graded in --out from the same files, lab and grader; also "
                             "needed to add another SUBMISSIONS folder (a later lab's downloads) to --out's class")
    parser.add_argument("--connect-timeout", type=float, default=10, metavar="SECONDS",
                        help="how long to try to reach the --cluster scheduler (default: 10)")
    parser.add_argument("--roster", type=Path, metavar="CANVAS_GRADEBOOK.csv",
                        help="the class list (Canvas: Grades > Export > Export Entire Gradebook): an LMS download's "
                             "uploaders are named by it, and the run lists who handed in nothing and which hand-ins "
                             "match no student; `course export` uses it too")
    parser.add_argument("--due", action="append", metavar="[LAB=]WHEN",
                        help="the due time of every lab (WHEN) or of one (LAB=WHEN; repeat for several): ISO 8601 with "
                             "a time and a zone, e.g. 2026-12-01T23:59-05:00 or 2026-12-01T23:59Z; kept in --out's "
                             "ledger for later runs ('none' removes it). A student's own due time: course adjust "
                             "--extension")
    parser.add_argument("--received", action="append", metavar="[LAB=]FILE",
                        help="the LMS's submission times, a CSV with a student column (ID, user_id, SIS User ID, SIS "
                             "Login ID, Email, student) and a time column (submitted_at, Submitted, Submission Time, "
                             "timestamp) with a zone: lateness then rests on the LMS's receipt, not the student's "
                             "timestamp.txt")
    parser.add_argument("--late-penalty", action="append", metavar="[LAB=]RULE",
                        help="points off a late hand-in, kept in the ledger: RATE/PERIOD[,max=CAP][,grace=DURATION], "
                             "e.g. 10%%/day,max=50%% (10%% of the points possible per started day, at most 50%%), "
                             "5%%/hour,grace=15min, 2/day; 'none' removes it")
    parser.add_argument("--solutions", type=Path, help="nbgrader source folder (default: <repo>/solutions)")
    parser.add_argument("--demo-specs", type=Path, metavar="DIR",
                        help="after grading, compare every demo student with its spec in DIR/<lab>/<student>.py "
                             "(correct: full marks, blank: 0, others: EXPECTED) and exit 1 on a mismatch")


def _options(args, known_labs: list[str]):
    """--due, --late-penalty, --received and --roster read and checked (GradingError names the option)."""
    from autograde.due import DueError, parse_due, parse_late_rule, read_receipts
    from autograde.layout import GradingError
    from autograde.lms import read_roster

    try:
        due = parse_due(args.due, known_labs)
        rules: dict[str, str | None] = {}
        for value in args.late_penalty or []:
            lab, sep, rule = value.partition("=")
            if not (sep and lab in known_labs):
                lab, rule = "*", value
            rules[lab] = None if rule.strip().lower() == "none" else parse_late_rule(rule).text
        receipts: dict[str, dict] = {}
        for value in args.received or []:
            lab, sep, path = value.partition("=")
            if not (sep and lab in known_labs):
                lab, path = "*", value
            receipts.setdefault(lab, {}).update(read_receipts(Path(path), None if lab == "*" else lab))
    except DueError as error:
        raise GradingError(str(error)) from None
    roster = read_roster(args.roster) if args.roster else None
    return due, rules, receipts, roster


def _record_policy(ledger, due, rules: dict[str, str | None]) -> None:
    """--due and --late-penalty into the ledger, where later runs, `course adjust` and `course export` read them."""
    from autograde.ledger import ALL_LABS

    state = ledger.state()
    wanted = [(lab, moment) for lab, moment in ([(ALL_LABS, due.default)] + sorted(due.by_lab.items())) if moment]
    for lab, moment in wanted:
        text = moment.isoformat(timespec="seconds") + "+00:00"
        current = state._get("due", lab)
        if current is None or current.data.get("due") != text:
            ledger.record("due", lab=lab, data={"due": text}, why="course grade --due")
    for lab in due.cleared:
        if state._get("due", lab) is not None:
            ledger.record("due", lab=lab, cleared=True, why="course grade --due none")
    for lab, rule in rules.items():
        current = state._get("late_rule", lab)
        if rule is None and current is not None:
            ledger.record("late_rule", lab=lab, cleared=True, why="course grade --late-penalty none")
        elif rule is not None and (current is None or current.data.get("rule") != rule):
            ledger.record("late_rule", lab=lab, data={"rule": rule}, why="course grade --late-penalty")


def run(args) -> int:
    from autograde.dispatch import GradeRun, gpu_cells_skipped, grade
    from autograde.grader_limits import grader_enforcement
    from autograde.intake import course_chapters, take_in
    from autograde.layout import GradingError, find_repo_root, list_labs
    from autograde.ledger import Ledger
    from autograde.out_folder import check_same_class, claim, record_source
    from autograde.outputs import write_class_outputs
    from autograde.report import (awaiting_lines, intake_lines, intake_table, one_line_summary, score_table,
                                  version_warnings)
    from autograde.snapshot import lab_bundle
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
    outputs, intake = None, None
    try:
        solutions_dir = (args.solutions or find_repo_root() / "solutions").resolve()
        known_labs = list_labs(solutions_dir)
        if args.lab and args.lab not in known_labs:
            raise GradingError(f"unknown lab {args.lab!r}; labs in {solutions_dir}: {', '.join(known_labs) or 'none'}")
        due, rules, receipts, roster = _options(args, known_labs)
        with claim(out):
            check_same_class(out, args.submissions, resume=args.resume)
            intake = take_in(args.submissions, out / "unpacked", course_chapters(solutions_dir, known_labs),
                             roster=roster, receipts=receipts)
            record_source(out, args.submissions)
            if roster is not None:
                shutil.copyfile(roster.path, out / "roster.csv")
            ledger = Ledger(out)
            _record_policy(ledger, due, rules)
            where = args.cluster or f"{args.jobs} local worker{'s' if args.jobs > 1 else ''}"
            entries, hand_ins = len(intake.sources), len(intake.hand_ins)
            print(f"Grading {args.submissions} ({entries} entr{'y' if entries == 1 else 'ies'}, {hand_ins} "
                  f"hand-in{'' if hand_ins == 1 else 's'}) on {where}; per-cell limit {args.timeout} s", file=sys.stderr)
            isolation = detect_isolation()
            print(f"Student kernels: {isolation.description}", file=sys.stderr)
            own_user = isolation.name != "none" and _can_switch_user()
            print(f"Limits per kernel: {limits.summary()}", file=sys.stderr)
            _print_policy(ledger, sorted({hand_in.lab for hand_in in intake.hand_ins.values()}), bool(receipts))
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
                grade(intake.folder, out, solutions_dir=solutions_dir, known_labs=known_labs,
                      only_lab=args.lab, only_student=args.student, timeout=args.timeout, jobs=args.jobs,
                      cluster=args.cluster, resume=args.resume, connect_timeout=args.connect_timeout,
                      on_start=on_start, run=run, limits=limits,
                      hand_ins={key: hand_in.meta() for key, hand_in in intake.hand_ins.items()})
                finished = True
            finally:
                # Whatever stopped the run (an error, Ctrl-C), the class files are rebuilt from the results kept.
                if (out / "results").is_dir() and (finished or run.graded or run.failed):
                    problems = run.discovery_problems + run.problems
                    device = ("GPU workers for GPU-only checks" if run.gpu_route
                              else "CPU (GPU-only checks are skipped; Triton runs interpreted)")
                    current = {lab: lab_bundle(solutions_dir, lab).digest for lab in known_labs}
                    outputs = write_class_outputs(out, solutions_dir, problems=problems, device=device,
                                                  timeout=args.timeout, limits=limits.as_dict(),
                                                  intake=intake.as_dict(), current_tests=current)
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
    stored, finals = (outputs.stored, outputs.finals) if outputs else ([], [])
    lines = intake_lines(intake.as_dict(), stored)
    print(f"SUBMISSIONS: {len(lines)} entr{'y' if len(lines) == 1 else 'ies'}, one line each")
    print(intake_table(lines) or "(empty)")
    print()
    print(score_table(stored, finals, current_tests=current if outputs else None))
    _print_hand_in_times(finals)
    for warning in version_warnings(stored, current if outputs else None):
        print(f"\nwarning: {warning}")
    if finals:
        print("\n" + one_line_summary(finals))
    waiting = awaiting_lines(finals, args.out)
    if waiting:
        print("\nWritten answers (graded by TAs with their rubrics; scores stay incomplete until then):")
        print("\n".join(f"  {line}" for line in waiting))
    skipped_gpu = gpu_cells_skipped([entry.result for entry in stored])
    summary = f"\ngraded {run.graded} of {run.total}"
    if run.resumed:
        summary += f", {run.resumed} already graded (--resume)"
    if run.failed:
        summary += f", {run.failed} failed"
    if skipped_gpu:
        summary += f"; {skipped_gpu} GPU-only test cells skipped (no GPU worker): left out of max_score"
    print(summary)
    for lab, students in intake.roster_missing.items():
        print(f"roster: {len(students)} handed in nothing for {lab}: {', '.join(students[:20])}"
              + (" ..." if len(students) > 20 else ""))
    if intake.roster_unknown:
        print(f"roster: {len(intake.roster_unknown)} hand-in(s) match no student of the roster: "
              f"{', '.join(intake.roster_unknown[:20])}")
    for problem in run.discovery_problems:
        print(f"not graded: {problem}")
    for problem in run.problems + (outputs.notes if outputs else []):
        print(f"problem: {problem}")
    if outputs:
        print(f"\ngrades:    {outputs.grades}\nreport:    {outputs.report}\nfeedback:  {out / 'feedback'}"
              f"\nwhy:       course why {out} STUDENT   (every lost point in full: {out / 'instructor'}, yours only)"
              + (f"\ngradebook: {outputs.gradebook} (formgrader: open {out})" if outputs.gradebook else ""))
    if run.interrupted:
        return 130
    if run.graded + run.resumed == 0:
        print(f"course grade: nothing was graded: no hand-in in {args.submissions} could be graded"
              + (f" for --lab {args.lab}" if args.lab else "") + " (each entry's reason is listed above)",
              file=sys.stderr)
        return 1
    if args.demo_specs and outputs:
        return _compare_with_demo_specs(outputs.report, args.demo_specs)
    return 0


def _print_policy(ledger, labs: list[str], receipts: bool) -> None:
    """The due times and late rules the ledger holds for the labs of this run (they apply to later runs too)."""
    from autograde.due import CLAIM

    state = ledger.state()
    lines = []
    for lab in labs:
        due, rule = state.due(lab), state.late_rule(lab)
        if due or rule:
            lines.append(f"{lab} {due.data['due'] if due else 'no due time'}"
                         + (f", late penalty {rule.data['rule']}" if rule else ", no late penalty"))
    if lines:
        basis = "the LMS's receipt times (--received)" if receipts else f"the LMS's late flag, else {CLAIM}"
        print(f"Due (kept in {ledger.path.name}): {'; '.join(lines)}; hand-in times from {basis}", file=sys.stderr)


def _print_hand_in_times(finals) -> None:
    entries = [final.hand_in for final in finals if final.hand_in]
    if not entries:
        return
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    print("\nhand-in times: " + ", ".join(f"{count} {status}" for status, count in sorted(counts.items())))
    if any("claim" in status for status in counts):
        print("  a claim is the student's own timestamp.txt, not a receipt: check late and disputed ones against your "
              "LMS's submission times (or give them with --received)")


def _can_switch_user() -> bool:
    """Whether sandboxed kernels get a user id of their own here (root, with setpriv)."""
    import os
    import shutil

    return os.geteuid() == 0 and shutil.which("setpriv") is not None


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
