"""How often each notebook claim holds on a busy machine.

Every sentence of a notebook that states what a measurement shows is backed by a claim
(``course_lib.claims.claim``) that prints whether it held in that run. This script runs the
solution notebooks (the reference answers) N times each, with K busy loops spinning beside them
as a student's laptop has a browser and a music player, and prints per claim how often it held::

    python benchmarks/claims.py --runs 10 --busy 2                       # Labs 0.1, 0.2, 0.4 and 0.5
    python benchmarks/claims.py --runs 3 --notebooks lab05-serving/02_load
    python benchmarks/claims.py --runs 10 --busy 2 --markdown claims.md   # the table for RESULTS.md

A run of one notebook is one fresh kernel in a scratch copy of its lab folder (``course solve``'s
runner), with ``COURSE_CLAIMS_LOG`` pointing at a log to which each claim appends a line. Rounds go
over every notebook in turn (notebook A, B, C, then A, B, C again), so a slow spell of the machine
falls on different notebooks rather than on all runs of one. A claim that was not checked in a run
(its condition raised, or the notebook stopped before it) counts as not held; one the notebook
skips on purpose (``skip_claim``: this machine cannot measure it) is listed apart with its reason.
Lab 0.3's claims are about a GPU; on a machine without one its notebooks are skipped with that
reason unless named.

A long run can be stopped: Ctrl-C (or SIGTERM) ends it after the notebook in progress, and the table
counts the rounds that completed (``--log`` has kept their claims as each round ended).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LABS = ("lab01-text-to-tensors", "lab02-prefill-vs-decode", "lab04-faster-decoding", "lab05-serving")
GPU_LABS = ("lab03-kernels",)
TARGET = 0.9


def _stop_on_term(signum, frame) -> None:
    raise KeyboardInterrupt


def _spin() -> None:
    while True:
        pass


@dataclass
class Tally:
    held: int = 0
    measured: list = field(default_factory=list)


def _notebooks(args) -> list[Path]:
    if args.notebooks:
        paths = []
        for name in args.notebooks:
            path = ROOT / "solutions" / (name if name.endswith(".ipynb") else f"{name}.ipynb")
            if not path.is_file():
                sys.exit(f"--notebooks: no solution notebook {path.relative_to(ROOT)}; give LAB/NOTEBOOK, "
                         f"e.g. lab05-serving/02_load")
            paths.append(path)
        return paths
    labs = args.labs or list(DEFAULT_LABS)
    for lab in labs:
        if not (ROOT / "solutions" / lab).is_dir():
            sys.exit(f"--labs: unknown lab {lab!r}; labs: {', '.join(sorted(p.name for p in (ROOT / 'solutions').iterdir()))}")
    return [path for lab in labs for path in sorted((ROOT / "solutions" / lab).glob("*.ipynb"))]


def _run_notebook(path: Path, log: Path, timeout: int) -> tuple[float, list[str]]:
    from autograde.solve import solve_notebook

    os.environ["COURSE_CLAIMS_LOG"] = str(log)
    os.environ["COURSE_CLAIMS_NOTEBOOK"] = f"{path.parent.name}/{path.stem}"
    try:
        result = solve_notebook(path, timeout=timeout)
    finally:
        os.environ.pop("COURSE_CLAIMS_LOG", None)
        os.environ.pop("COURSE_CLAIMS_NOTEBOOK", None)
    return result.seconds, [str(failure) for failure in result.failures]


def _read_log(log: Path) -> list[dict]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs of each notebook (default 10)")
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the notebooks (default 2)")
    parser.add_argument("--labs", nargs="+", help=f"labs to run (default: {', '.join(DEFAULT_LABS)})")
    parser.add_argument("--notebooks", nargs="+", metavar="LAB/NOTEBOOK", help="only these solution notebooks")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    parser.add_argument("--log", type=Path, help="keep the raw claim log (JSON lines) here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.busy < 0:
        parser.error("--runs must be >= 1 and --busy >= 0")
    notebooks = _notebooks(args)
    from autograde.layout import gpu_available

    if not gpu_available() and not args.notebooks:
        skipped = [path for path in notebooks if path.parent.name in GPU_LABS]
        notebooks = [path for path in notebooks if path.parent.name not in GPU_LABS]
        if skipped:
            print(f"skipped {len(skipped)} notebooks of {', '.join(GPU_LABS)}: their claims are about a GPU and "
                  f"this machine has none")
    if args.log:
        args.log.write_text("")
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    # after the spinners start, so that terminating them stays quiet
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a job started with & ignores Ctrl-C otherwise
    signal.signal(signal.SIGTERM, _stop_on_term)
    started = time.perf_counter()
    try:
        rounds = run_rounds(notebooks, args.runs, lambda path, log: _run_notebook(path, log, args.timeout), args.log)
    finally:
        for spinner in spinners:
            spinner.terminate()
    if rounds.done < args.runs:
        print(f"\nstopped after {rounds.done} complete rounds of {args.runs}; the table counts those", flush=True)
    runs = rounds.done
    if runs == 0:
        print("no round completed: nothing to count")
        return 1
    table = _table(rounds.tallies, rounds.seconds, runs, rounds.skipped)
    header = (f"{date.today().isoformat()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"{args.busy} busy loops, {runs} runs, {(time.perf_counter() - started) / 60:.0f} min")
    print("\n" + header + "\n" + table)
    if rounds.problems:
        print("\nfailing cells:\n  " + "\n  ".join(rounds.problems[:40]))
    if args.markdown:
        args.markdown.write_text(header + "\n\n" + table + "\n")
    below = [key for key, tally in rounds.tallies.items() if tally.held < TARGET * runs]
    return 1 if below or rounds.problems or runs < args.runs else 0


@dataclass
class Rounds:
    """What the complete rounds measured: a round interrupted half-way counts for nothing."""

    done: int = 0
    tallies: dict = field(default_factory=lambda: defaultdict(Tally))
    skipped: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=lambda: defaultdict(list))
    problems: list = field(default_factory=list)

    def add(self, name: str, records: list[dict]) -> None:
        for record in records:
            if record.get("skipped"):
                self.skipped[(name, record["statement"])] = record["skipped"]
                continue
            tally = self.tallies[(name, record["statement"])]
            tally.held += bool(record["held"])
            tally.measured.append(record.get("measured", ""))


def run_rounds(notebooks: list[Path], runs: int, run_one, keep_log: Path | None = None) -> Rounds:
    """Run every notebook once per round, ``runs`` rounds; Ctrl-C stops after counting the complete rounds.

    ``run_one(path, log) -> (seconds, failures)`` runs one notebook with its claims appended to
    ``log``. With ``keep_log``, each complete round's claim records are appended there as the round
    ends, so a long run that is stopped keeps what it measured.
    """
    rounds = Rounds()
    with tempfile.TemporaryDirectory(prefix="course-claims-") as scratch:
        try:
            for run in range(runs):
                log = Path(scratch) / f"run{run}.jsonl"
                measured = []
                for path in notebooks:
                    name = f"{path.parent.name}/{path.stem}"
                    before = len(_read_log(log))
                    elapsed, failures = run_one(path, log)
                    measured.append((name, elapsed, failures, _read_log(log)[before:]))
                    print(f"run {run + 1}/{runs} {name}: {elapsed:.0f} s"
                          f"{f', {len(failures)} failing cells' if failures else ''}", flush=True)
                for name, elapsed, failures, records in measured:
                    rounds.seconds[name].append(elapsed)
                    rounds.problems += [f"run {run + 1}: {failure}" for failure in failures]
                    rounds.add(name, records)
                rounds.done += 1
                if keep_log and log.exists():
                    with keep_log.open("a", encoding="utf-8") as out:
                        out.write(log.read_text(encoding="utf-8"))
        except KeyboardInterrupt:
            pass
    return rounds


def _table(tallies: dict, seconds: dict, runs: int, skipped: dict | None = None) -> str:
    rows = ["| notebook | claim | held | example of what was measured |", "| --- | --- | --- | --- |"]
    for (notebook, statement), tally in sorted(tallies.items()):
        mark = "" if tally.held >= TARGET * runs else " **below 9/10**"
        example = next((m for m in tally.measured if m), "")
        rows.append(f"| {notebook} | {statement} | {tally.held}/{runs}{mark} | {example} |")
    for (notebook, statement), reason in sorted((skipped or {}).items()):
        if (notebook, statement) not in tallies:
            rows.append(f"| {notebook} | {statement} | skipped | {reason} |")
    rows.append("")
    rows.append("| notebook | seconds per run (min / median / max) |")
    rows.append("| --- | --- |")
    for notebook, times in sorted(seconds.items()):
        ordered = sorted(times)
        rows.append(f"| {notebook} | {ordered[0]:.0f} / {ordered[len(ordered) // 2]:.0f} / {ordered[-1]:.0f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
