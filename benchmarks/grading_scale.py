"""Grading at class scale: submissions per minute with 1 and with 2 local Dask workers.

Builds a class of ``--submissions`` students, each a copy of one of the demo students of ``--lab``
that hand in ``--notebook`` (by default lab01's cheapest chapter, 04_paging: the correct answer,
the untouched release and the buggy ones), each student handing in only that notebook, and grades it
with ``course grade --jobs J`` for every J of ``--jobs``, in a fresh output folder each time. The
time is the whole command, wall clock: starting the workers, preparing the lab on each, grading,
and writing grades.csv, report.json and the merged gradebook. Reported: submissions per minute and
the speedup over the first J. The scores of every run must be the same (checked).

    python benchmarks/grading_scale.py --submissions 200 --jobs 1 2          # the full run
    python benchmarks/grading_scale.py --submissions 20 --jobs 1 2           # a dry run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_class(submissions: Path, lab: str, notebook: str, count: int) -> list[str]:
    """``count`` students s0001.. cycling through the demo students that hand in ``notebook``."""
    demo = ROOT / "autograde" / "demo_submissions"
    sources = sorted(path for path in demo.glob(f"*/{lab}/{notebook}.ipynb"))
    if not sources:
        raise SystemExit(f"no demo student of {lab} hands in {notebook}.ipynb")
    for index in range(count):
        folder = submissions / f"s{index + 1:04d}" / lab
        folder.mkdir(parents=True)
        shutil.copy2(sources[index % len(sources)], folder / f"{notebook}.ipynb")
    return [path.parts[-3] for path in sources]


def grade(submissions: Path, out: Path, lab: str, jobs: int, timeout: int) -> float:
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "course_lib.cli", "grade", str(submissions), "--lab", lab,
                                "--out", str(out), "--jobs", str(jobs), "--timeout", str(timeout)],
                               cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"course grade --jobs {jobs} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", default="lab01-text-to-tensors")
    parser.add_argument("--notebook", default="04_paging")
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--timeout", type=int, default=120, help="per-cell limit (s)")
    args = parser.parse_args()
    if args.submissions < 1 or any(j < 1 for j in args.jobs):
        parser.error("--submissions and --jobs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-grading-scale-") as scratch:
        submissions = Path(scratch) / "submissions"
        kinds = build_class(submissions, args.lab, args.notebook, args.submissions)
        print(f"{args.submissions} submissions of {args.lab}/{args.notebook} (copies of {', '.join(kinds)}); "
              f"{os.cpu_count()} CPUs, {platform.machine()}, {date.today()}", flush=True)
        rows, reference = [], None
        for jobs in args.jobs:
            out = Path(scratch) / f"out-{jobs}"
            seconds = grade(submissions, out, args.lab, jobs, args.timeout)
            report = json.loads((out / "report.json").read_text())
            scores = {entry["student"]: entry["score"] for entry in report["submissions"]}
            if len(scores) != args.submissions:
                raise SystemExit(f"--jobs {jobs}: {len(scores)} results for {args.submissions} submissions")
            if reference is None:
                reference = scores
            elif scores != reference:
                raise SystemExit(f"--jobs {jobs} gave other scores than --jobs {args.jobs[0]}")
            rows.append((jobs, seconds, args.submissions / seconds * 60))
            print(f"  --jobs {jobs}: {seconds:.0f} s", flush=True)
    print("\n| local workers | wall time (s) | submissions per minute | speedup |\n| --- | --- | --- | --- |")
    for jobs, seconds, rate in rows:
        print(f"| {jobs} | {seconds:.0f} | {rate:.2f} | {rate / rows[0][2]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
