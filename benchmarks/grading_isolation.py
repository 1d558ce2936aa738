"""What isolating student code costs: grading a lab with the isolated grader against the old in-kernel one.

The old grader (before the student kit) ran every cell, test cells included, in one Jupyter kernel
per notebook on the instructor's library. The isolated grader starts a sandboxed kernel on the
student edition and runs the test cells in the grader, calling the student's code over a channel.
This script grades the same submissions with both, alternating runs so the machine's load falls
on both alike, and reports the median wall-clock time of each and their ratio (goal: <= 1.3).

Both grade the same lab: the old grader runs from a temporary copy of this checkout in which
``course_lib/grading/``, ``course_lib/commands/grade.py`` and ``course_lib/cli.py`` are those of ``--baseline`` (default:
the last commit before the isolation change), so the notebooks, hidden tests and checks are
today's in both runs and only the grading machinery differs. (Grading the baseline commit's own
labs would compare older, lighter notebooks.)

    python benchmarks/grading_isolation.py --lab lab01-text-to-tensors --students correct blank --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = "d42d4de"


# The grader of the baseline lived in the library (today's lives in autograde/, run by autograde.cli).
OLD_GRADER_PATHS = ("course_lib/grading", "course_lib/commands/grade.py", "course_lib/cli.py")


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


def _grade(checkout: Path, submissions: Path, out: Path, lab: str, pythonpath: str | None,
           extra: tuple[str, ...] = ()) -> float:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    cli = "course_lib.cli" if pythonpath else "autograde.cli"   # the baseline's command, or today's
    completed = subprocess.run([sys.executable, "-m", cli, "grade", str(submissions), "--out", str(out),
                                "--lab", lab, *extra], cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"grading failed in {checkout}:\n{completed.stderr[-3000:]}")
    return seconds


def cell_seconds(out: Path) -> dict[tuple[str, str, int], tuple[float, str]]:
    """(student, notebook, code cell number) -> (seconds, first line) from an output folder's autograded
    notebooks, which both graders stamp with nbclient's timing keys."""
    seconds = {}
    for path in sorted(out.glob("**/autograded/*/*/*.ipynb")):
        cells = [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]
        for number, cell in enumerate(cells, 1):
            timing = cell.get("metadata", {}).get("execution", {})
            if "iopub.status.busy" in timing and "shell.execute_reply" in timing:
                start, end = (datetime.fromisoformat(timing[key].replace("Z", "+00:00"))
                              for key in ("iopub.status.busy", "shell.execute_reply"))
                source = "".join(cell["source"]).strip().splitlines() or [""]
                seconds[(path.parts[-3], path.stem, number)] = ((end - start).total_seconds(), source[0][:60])
    return seconds


def print_cell_comparison(old_out: Path, new_out: Path, count: int) -> None:
    """The ``count`` cells whose time differs most between the two graders, and the totals."""
    old, new = cell_seconds(old_out), cell_seconds(new_out)
    shared = sorted(set(old) & set(new), key=lambda key: old[key][0] - new[key][0])
    print(f"\ncode cells: old {sum(v for v, _ in old.values()):.1f} s, isolated {sum(v for v, _ in new.values()):.1f} s"
          f"\n| student | notebook | cell | old s | isolated s | first line |\n| --- | --- | ---: | ---: | ---: | --- |")
    for key in shared[:count]:
        print(f"| {key[0]} | {key[1]} | {key[2]} | {old[key][0]:.2f} | {new[key][0]:.2f} | `{new[key][1]}` |")
    notebooks = sorted({key[:2] for key in old} | {key[:2] for key in new})
    print("\n| student | notebook | old s | isolated s |\n| --- | --- | ---: | ---: |")
    for notebook in notebooks:
        totals = [sum(v for key, (v, _) in side.items() if key[:2] == notebook) for side in (old, new)]
        print(f"| {notebook[0]} | {notebook[1]} | {totals[0]:.1f} | {totals[1]:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", default="lab01-text-to-tensors")
    parser.add_argument("--students", nargs="+", default=["correct"], help="demo students to grade")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision of the old grader")
    parser.add_argument("--cells", type=int, default=0, metavar="N",
                        help="also print the N cells whose time differs most between the graders (last run)")
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
                    # The old grader keeps its autograded notebooks (with cell timings) only in a named workspace.
                    extra = ("--workspace", str(out / "workspace")) if pythonpath else ()
                    times[name].append(_grade(checkout, submissions, out, args.lab, pythonpath, extra))
                    print(f"run {repeat + 1}: {name}: {times[name][-1]:.1f} s", flush=True)
            if args.cells:
                last = args.repeats - 1
                print_cell_comparison(scratch_path / f"out-old-{last}", scratch_path / f"out-iso-{last}", args.cells)
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
