"""Benchmark: how long each book figure (``course_lib.viz``) takes to draw and render to PNG.

The book's chapters draw their figures when the site is built (the ``viz-figure`` directive), so
every figure adds to each ``course book`` run. Target: each figure under ``--target`` CPU seconds
(default 2) in a warm process. The first figure drawn in a process also pays for matplotlib's
start-up (fonts, the Agg renderer), so every figure is drawn once to warm up and then timed
``--repeats`` times; the table gives the median.

Times are CPU seconds of this process (``time.process_time``), comparable when other jobs share
the machine; the wall time is printed beside them. This was a timed unit test in
``tests/test_book.py`` until a slow CI machine failed it at 2.2 s: speed targets belong here.

Run: ``python benchmarks/book_figures.py`` (under a minute); ``--only NAME`` for one figure.
Exit status 1 when a figure misses the target.
"""

from __future__ import annotations

import argparse
import datetime
import io
import platform
import statistics
import sys
import time

from course_lib import viz


def time_figure(name: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) to draw figure ``name`` with its defaults and render it to PNG."""
    cpu, wall = time.process_time(), time.perf_counter()
    getattr(viz, name)().savefig(io.BytesIO(), format="png")
    return time.process_time() - cpu, time.perf_counter() - wall


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="book_figures.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed draws per figure, after one warm-up (default 3)")
    parser.add_argument("--target", type=float, default=2.0, help="CPU seconds allowed per figure (default 2)")
    parser.add_argument("--only", metavar="NAME", help="time this figure only")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.target <= 0:
        parser.error(f"--target must be above 0 seconds, got {args.target}")
    if args.only and args.only not in viz.figure_names():
        parser.error(f"--only must name a figure of course_lib.viz: {', '.join(viz.figure_names())}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [args.only] if args.only else viz.figure_names()
    print(f"# book figures, {datetime.date.today()}, {platform.node()}, {platform.processor() or platform.machine()}")
    print("| figure | CPU s (median) | wall s (median) | target |")
    print("| --- | --- | --- | --- |")
    missed = []
    for name in names:
        time_figure(name)   # warm-up: matplotlib's first-use costs are not the figure's
        runs = [time_figure(name) for _ in range(args.repeats)]
        cpu = statistics.median(run[0] for run in runs)
        wall = statistics.median(run[1] for run in runs)
        verdict = "met" if cpu < args.target else "MISSED"
        if cpu >= args.target:
            missed.append(name)
        print(f"| {name} | {cpu:.3f} | {wall:.3f} | {verdict} |")
    if missed:
        print(f"over {args.target:g} s of CPU: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
