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
    python benchmarks/grading_scale.py --jobs 1 --cluster tcp://HOST:8786    # one machine, then a cluster

With ``--cluster``, the same class is also graded on the workers of that Dask scheduler (started
beforehand: ``dask scheduler``, then ``dask worker tcp://HOST:8786 --nworkers 2 --nthreads 1`` on
each machine) and reported as one more row, its speedup over the first local run.
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


def grade(submissions: Path, out: Path, lab: str, workers: list[str], timeout: int) -> float:
    """Wall-clock seconds of ``course grade`` with ``workers`` (``["--jobs", "2"]`` or ``["--cluster", ADDRESS]``)."""
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "autograde.cli", "grade", str(submissions), "--lab", lab,
                                "--out", str(out), *workers, "--timeout", str(timeout)],
                               cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"course grade {' '.join(workers)} failed:\n{completed.stdout[-2000:]}\n"
                         f"{completed.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", default="lab01-text-to-tensors")
    parser.add_argument("--notebook", default="04_paging")
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--timeout", type=int, default=120, help="per-cell limit (s)")
    parser.add_argument("--cluster", metavar="tcp://HOST:PORT",
                        help="also grade the class on this Dask scheduler's workers (one more row)")
    args = parser.parse_args()
    if args.submissions < 1 or any(j < 1 for j in args.jobs):
        parser.error("--submissions and --jobs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-grading-scale-") as scratch:
        submissions = Path(scratch) / "submissions"
        kinds = build_class(submissions, args.lab, args.notebook, args.submissions)
        print(f"{args.submissions} submissions of {args.lab}/{args.notebook} (copies of {', '.join(kinds)}); "
              f"{os.cpu_count()} CPUs, {platform.machine()}, {date.today()}", flush=True)
        runs = [(f"{jobs} local", ["--jobs", str(jobs)]) for jobs in args.jobs]
        if args.cluster:
            runs.append((args.cluster, ["--cluster", args.cluster]))
        rows, reference = [], None
        for index, (label, workers) in enumerate(runs):
            out = Path(scratch) / f"out-{index}"
            seconds = grade(submissions, out, args.lab, workers, args.timeout)
            report = json.loads((out / "report.json").read_text())
            scores = {entry["student"]: entry["score"] for entry in report["submissions"]}
            if len(scores) != args.submissions:
                raise SystemExit(f"{' '.join(workers)}: {len(scores)} results for {args.submissions} submissions")
            if reference is None:
                reference = scores
            elif scores != reference:
                raise SystemExit(f"{' '.join(workers)} gave other scores than {' '.join(runs[0][1])}")
            rows.append((label, seconds, args.submissions / seconds * 60))
            print(f"  {' '.join(workers)}: {seconds:.0f} s", flush=True)
    print("\n| workers | wall time (s) | submissions per minute | speedup |\n| --- | --- | --- | --- |")
    for label, seconds, rate in rows:
        print(f"| {label} | {seconds:.0f} | {rate:.2f} | {rate / rows[0][2]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
