"""`course solve`: run the solution notebooks and fail, naming the cell, if a cell fails."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Run the solution notebooks and fail, naming the cell, if a test cell fails."
DESCRIPTION = """\
Execute every solution notebook of one lab (or of all labs) top to bottom, each in a fresh
kernel and a scratch copy of its folder, with the reference answers and the hidden tests in
place. Any cell that raises is listed with its notebook, position and nbgrader id; the exit
code is 1 if there was one. This is how maintainers know the course still works.

examples:
  course solve                          # all labs
  course solve lab01-text-to-tensors    # one lab
  course solve lab01-text-to-tensors --notebook 01_tokenization
"""


def add_arguments(parser) -> None:
    parser.add_argument("lab", nargs="?", help="lab folder name (default: all labs)")
    parser.add_argument("--notebook", action="append", metavar="NAME",
                        help="run only this notebook of the lab (file name without .ipynb); repeatable")
    parser.add_argument("--timeout", type=int, default=600, metavar="SECONDS",
                        help="time limit per cell (default: 600)")
    parser.add_argument("--solutions", type=Path, help="nbgrader source folder (default: <repo>/solutions)")


def run(args) -> int:
    from tqdm import tqdm

    from autograde.layout import GradingError, find_repo_root, resolve_labs
    from autograde.solve import solve_notebook

    try:
        solutions_dir = (args.solutions or find_repo_root() / "solutions").resolve()
        labs = resolve_labs(solutions_dir, args.lab)
    except GradingError as error:
        print(f"course solve: {error}", file=sys.stderr)
        return 1
    paths = [path for lab in labs for path in sorted((solutions_dir / lab).glob("*.ipynb"))]
    if args.notebook:
        wanted = set(args.notebook)
        unknown = wanted - {path.stem for path in paths}
        if unknown:
            print(f"course solve: no notebook named {', '.join(sorted(unknown))} in {', '.join(labs)}", file=sys.stderr)
            return 1
        paths = [path for path in paths if path.stem in wanted]

    failures = []
    for path in paths:
        with tqdm(desc=f"{path.parent.name}/{path.stem}", unit="cell", file=sys.stderr, disable=None) as bar:
            def on_cell(index, total):
                bar.total = total
                bar.update(1)

            result = solve_notebook(path, timeout=args.timeout, on_cell=on_cell)
        status = "ok" if not result.failures else f"{len(result.failures)} failing cell(s)"
        print(f"{result.notebook}: {status} ({result.seconds:.1f} s)")
        failures.extend(result.failures)
    if failures:
        print("\nFailing cells:")
        for failure in failures:
            print(f"  {failure}")
        return 1
    print(f"\nAll {len(paths)} solution notebook(s) ran without errors.")
    return 0
