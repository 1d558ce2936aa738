"""What isolating student code costs: grading a lab with the isolated grader against the old in-kernel one.

The old grader (before the student kit) ran every cell, test cells included, in one Jupyter kernel
per notebook on the instructor's library. The isolated grader starts a sandboxed kernel on the
student edition and runs the test cells in the grader, calling the student's code over a channel.
This script grades the same submissions with both, alternating runs so the machine's load falls
on both alike, and reports the median wall-clock time of each and their ratio (goal: <= 1.3).

Both grade the same lab: the old grader runs from a temporary copy of this checkout in which
``course_lib/grading/`` and ``course_lib/commands/grade.py`` are those of ``--baseline`` (default:
the last commit before the isolation change), so the notebooks, hidden tests and checks are
today's in both runs and only the grading machinery differs. (Grading the baseline commit's own
labs would compare older, lighter notebooks.)

    python benchmarks/grading_isolation.py --lab lab01-text-to-tensors --students correct blank --repeats 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = "d42d4de"


OLD_GRADER_PATHS = ("course_lib/grading", "course_lib/commands/grade.py")


def _old_grader_on_todays_labs(target: Path, revision: str) -> None:
    """This checkout's tracked files, with the grading machinery of ``revision`` in place of today's."""
    target.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-c", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in files.decode().split("\0"):
        if name and not name.startswith(OLD_GRADER_PATHS) and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    archive = subprocess.run(["git", "archive", revision, *OLD_GRADER_PATHS], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-xf", "-"], cwd=target, input=archive, check=True)


def _grade(checkout: Path, submissions: Path, out: Path, lab: str, pythonpath: str | None) -> float:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "course_lib.cli", "grade", str(submissions), "--out", str(out),
                                "--lab", lab], cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"grading failed in {checkout}:\n{completed.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", default="lab01-text-to-tensors")
    parser.add_argument("--students", nargs="+", default=["correct"], help="demo students to grade")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision of the old grader")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as scratch:
        scratch_path = Path(scratch)
        baseline = scratch_path / "baseline"
        _old_grader_on_todays_labs(baseline, args.baseline)
        try:
            submissions = scratch_path / "submissions"
            for student in args.students:
                source = ROOT / "autograde" / "demo_submissions" / student / args.lab
                if not source.is_dir():
                    parser.error(f"no demo submission {source}")
                shutil.copytree(source, submissions / student / args.lab)
            times: dict[str, list[float]] = {"old (in-kernel)": [], "isolated": []}
            for repeat in range(args.repeats):
                for name, checkout, pythonpath in (("old (in-kernel)", baseline, str(baseline)),
                                                    ("isolated", ROOT, None)):
                    out = scratch_path / f"out-{name[:3]}-{repeat}"
                    times[name].append(_grade(checkout, submissions, out, args.lab, pythonpath))
                    print(f"run {repeat + 1}: {name}: {times[name][-1]:.1f} s", flush=True)
        finally:
            shutil.rmtree(baseline, ignore_errors=True)
    old, new = statistics.median(times["old (in-kernel)"]), statistics.median(times["isolated"])
    print(f"\n{args.lab}, students {', '.join(args.students)}, {args.repeats} alternated runs each")
    print(f"| grader | median s | runs |\n| --- | ---: | --- |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    print(f"\nratio isolated / old: {new / old:.2f} (goal <= 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
