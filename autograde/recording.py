"""Recording the reference side of every visible check, for the student kit (``course release``).

The kit's visible tests compare a student's answer with results recorded here (see
``course_lib.checks.fixtures``). For one lab: each release notebook, with its answer cells filled
with the reference answers, runs top to bottom in a kernel on the instructor edition with
``COURSE_RECORD_FIXTURES`` set, exactly as a student would run it in JupyterLab (test cells
included, hidden tests excluded: the release has none). Every visible check call leaves a
recording; they are written to ``course_lib/checks/recorded/<lab>.json`` together with the
fingerprint of every file the run depended on (the lab's solution notebooks and the ``course_lib``
modules the kernel imported), so ``course release --check`` can tell a stale recording without
running anything. A module's fingerprint covers its code only (its syntax tree without docstrings;
comments never reach the tree): editing prose does not change what a check computes, so it does
not make every kit's recordings stale.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import nbformat

from autograde.demos import DemoStudent, build_submission
from autograde.edition import is_docstring
from autograde.layout import GradingError
from autograde.release import Difference
from course_lib.checks.fixtures import RECORD_ENVIRONMENT
from course_lib.handin.notebooks import cell_label, nbgrader_meta
from course_lib.runner.sandbox import NONE, Isolation
from course_lib.runner.student import KernelDied, StudentKernel

__all__ = ["assemble_recordings", "fixture_path", "record_lab", "stale_fixtures", "stale_labs"]

_LOADED_MODULES = ("import sys as _course_sys\n"
                   "_course_modules = sorted({m.__file__ for n, m in list(_course_sys.modules.items()) "
                   "if (n == 'course_lib' or n.startswith('course_lib.')) and getattr(m, '__file__', None)})")


def fixture_path(root: Path, lab: str) -> Path:
    return root / "course_lib" / "checks" / "recorded" / f"{lab}.json"


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.body and is_docstring(node.body[0]):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


def _fingerprint(path: Path) -> str:
    """SHA-256 of a file; for a Python module, of its code alone (syntax tree without docstrings)."""
    data = path.read_bytes()
    if path.suffix == ".py":
        data = b"python-code-v1\n" + ast.dump(_without_docstrings(ast.parse(data, filename=str(path)))).encode()
    return hashlib.sha256(data).hexdigest()


# The kernel's machinery (the notebook runner: how the grader talks to a kernel, and the student
# tools beside it) is loaded by every recording kernel but decides none of the recorded values: a
# change there does not make the kits' recordings stale. (The rest of the platform is autograde/,
# outside course_lib, so it is never fingerprinted.)
_MACHINERY = ("course_lib/runner/", "course_lib/handin/")


def _inputs(root: Path, lab: str, module_files: list[str]) -> dict[str, str]:
    """{path relative to the repository: SHA-256} of what a lab's recording depends on."""
    paths = sorted((root / "solutions" / lab).glob("*.ipynb"))
    package = (root / "course_lib").resolve()
    for name in module_files:
        path = Path(name).resolve()
        if package in path.parents and not str(path.relative_to(root.resolve())).startswith(_MACHINERY):
            paths.append(path)
    return {str(path.resolve().relative_to(root.resolve())): _fingerprint(path) for path in sorted(set(paths))}


def stale_fixtures(root: Path, labs: list[str]) -> list[Difference]:
    """Labs whose recording is missing or was made from files that have changed since."""
    differences = []
    for lab in labs:
        path = fixture_path(root, lab)
        shown = str(path.relative_to(root))
        if not path.is_file():
            differences.append(Difference(shown, "file", "missing: the kit's visible tests have no recorded results"))
            continue
        inputs = json.loads(path.read_text(encoding="utf-8")).get("inputs", {})
        if not any(name.startswith("solutions/") for name in inputs):
            differences.append(Difference(shown, "inputs", "records no solution notebooks"))
        for name, digest in sorted(inputs.items()):
            if name.startswith(_MACHINERY):
                continue
            current = root / name
            if not current.is_file():
                differences.append(Difference(shown, "inputs", f"{name} no longer exists"))
            elif _fingerprint(current) != digest:
                differences.append(Difference(shown, "inputs", f"stale: {name} changed since it was recorded"))
        known = {name for name in inputs if name.startswith("solutions/")}
        for notebook in sorted((root / "solutions" / lab).glob("*.ipynb")):
            if str(notebook.relative_to(root)) not in known:
                differences.append(Difference(shown, "inputs", f"stale: {notebook.relative_to(root)} is new"))
    return differences


def stale_labs(root: Path, labs: list[str]) -> list[str]:
    """The labs among ``labs`` whose recording must be made again."""
    return [lab for lab in labs if stale_fixtures(root, [lab])]


def assemble_recordings(jsonl: str) -> dict[str, list[dict]]:
    """The JSON lines a recording kernel appended, grouped by key (duplicates dropped), keys sorted."""
    checks: dict[str, list[dict]] = {}
    for line in jsonl.splitlines():
        entry = json.loads(line)
        entries = checks.setdefault(entry.pop("key"), [])
        if entry not in entries:
            entries.append(entry)
    return dict(sorted(checks.items()))


def _run_recording(root: Path, lab: str, name: str, notebook, jsonl: Path, scratch: Path,
                   timeout: int, siblings: dict[str, object]) -> list[str]:
    """Run one release notebook (reference answers filled in) in a recording kernel; its module files.

    ``siblings`` (notebook stem -> notebook, answers filled in) are saved beside it, because a later
    chapter imports an earlier chapter's answers from its saved file (``course_lib.chapters``).
    """
    workdir = scratch / lab / name
    workdir.mkdir(parents=True)
    for stem, sibling in siblings.items():
        nbformat.write(sibling, workdir / f"{stem}.ipynb")
    environment = {RECORD_ENVIRONMENT: str(jsonl)}
    with StudentKernel(edition=root, workdir=workdir, isolation=Isolation(NONE, "recording"),
                       environment=environment) as kernel:
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            try:
                outputs = kernel.run_cell(cell.source, timeout)["outputs"]
            except KernelDied as error:
                raise GradingError(f"{lab}/{name}: {cell_label(cell, index)}: {error}") from None
            errors = [o for o in outputs if o.get("output_type") == "error"]
            if errors and nbgrader_meta(cell).get("grade"):
                error = errors[0]
                raise GradingError(f"{lab}/{name}: visible test {cell_label(cell, index)} fails on the reference "
                                   f"answers: {error.get('ename')}: {str(error.get('evalue'))[:300]}")
        kernel.run_cell(_LOADED_MODULES, timeout)
        return list(kernel.lookup("_course_modules"))


def record_lab(root: Path, lab: str, *, timeout: int = 600,
               progress: Callable[[str], None] | None = None) -> Path:
    """Record the visible checks of ``lab`` (from labs/<lab>, the release) into its fixture file."""
    root = root.resolve()
    release_dir, solutions_dir = root / "labs" / lab, root / "solutions" / lab
    correct = DemoStudent("correct", "the reference answers", "solution")
    module_files: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="course-record-") as scratch_name:
        scratch = Path(scratch_name)
        jsonl = scratch / "recordings.jsonl"
        jsonl.touch()
        notebooks = {}
        for solution_path in sorted(solutions_dir.glob("*.ipynb")):
            name = solution_path.stem
            release_path = release_dir / f"{name}.ipynb"
            if not release_path.is_file():
                raise GradingError(f"{release_path} is missing: run `course release {lab}` first")
            notebooks[name] = build_submission(nbformat.read(release_path, as_version=4),
                                               nbformat.read(solution_path, as_version=4), correct, name)
        for name, notebook in notebooks.items():
            module_files.update(_run_recording(root, lab, name, notebook, jsonl, scratch, timeout, notebooks))
            if progress:
                progress(name)
        checks = assemble_recordings(jsonl.read_text(encoding="utf-8"))
    data = {"lab": lab, "inputs": _inputs(root, lab, sorted(module_files)), "checks": checks}
    path = fixture_path(root, lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path

