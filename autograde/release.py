"""The student release: nbgrader ``generate_assignment`` from solutions/ into labs/.

The release is generated in a scratch workspace, normalized (no outputs, no volatile metadata)
and then either written to labs/ or compared with the committed labs/ (``--check``), naming the
first cell that differs.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograde.layout import GradingError, Workspace
from course_lib.handin.notebooks import cell_label, comparable_cells, normalize_release, read_notebook


def generate_release(solutions_dir: Path, lab: str, workspace: Workspace) -> Path:
    """Run generate_assignment for ``lab`` in ``workspace``; returns the normalized release folder."""
    workspace.install_source(solutions_dir, lab)
    result = workspace.run_nbgrader("generate_assignment", lab, "--force", timeout=600)
    release_dir = workspace.path("release", lab)
    if result.returncode != 0 or not release_dir.is_dir():
        errors = [line for line in (result.stdout + result.stderr).splitlines() if "ERROR" in line or "Error" in line]
        detail = "\n".join(errors[-15:]) or (result.stdout + result.stderr)[-3000:]
        raise GradingError(f"nbgrader generate_assignment failed for {lab}:\n{detail}")
    for path in release_dir.glob("*.ipynb"):
        notebook = normalize_release(nbformat.read(path, as_version=4))
        nbformat.write(notebook, path)
    return release_dir


def write_release(release_dir: Path, labs_dir: Path, lab: str) -> Path:
    """Replace labs/<lab> with a freshly generated release."""
    target = labs_dir / lab
    staging = labs_dir / f".{lab}.new"
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(release_dir, staging)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)  # swap in one step so labs/ is never left half-written
    return target


@dataclass
class Difference:
    path: str
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.where}: {self.what}"


def compare_release(fresh_dir: Path, committed_dir: Path, display_root: Path) -> list[Difference]:
    """Differences between a fresh release and the committed one (files, then cells)."""
    differences: list[Difference] = []
    fresh_files = {p.relative_to(fresh_dir) for p in fresh_dir.rglob("*") if p.is_file()}
    committed_files = (
        {p.relative_to(committed_dir) for p in committed_dir.rglob("*") if p.is_file()}
        if committed_dir.is_dir() else set()
    )

    def shown(relative: Path) -> str:
        path = committed_dir / relative
        try:
            return str(path.relative_to(display_root))
        except ValueError:
            return str(path)

    for relative in sorted(fresh_files - committed_files):
        differences.append(Difference(shown(relative), "file", "missing from the committed release"))
    for relative in sorted(committed_files - fresh_files):
        differences.append(Difference(shown(relative), "file", "not produced by the solutions (stale file)"))
    for relative in sorted(fresh_files & committed_files):
        fresh_path, committed_path = fresh_dir / relative, committed_dir / relative
        if relative.suffix != ".ipynb":
            if fresh_path.read_bytes() != committed_path.read_bytes():
                differences.append(Difference(shown(relative), "file", "content differs"))
            continue
        try:
            committed_nb = read_notebook(committed_path)
        except Exception as error:
            differences.append(Difference(shown(relative), "notebook", str(error)))
            continue
        fresh_nb = nbformat.read(fresh_path, as_version=4)
        difference = _first_cell_difference(fresh_nb, committed_nb)
        if difference:
            differences.append(Difference(shown(relative), *difference))
    return differences


def _first_cell_difference(fresh, committed) -> tuple[str, str] | None:
    fresh_cells, committed_cells = comparable_cells(fresh), comparable_cells(committed)
    for index, (want, have) in enumerate(zip(fresh_cells, committed_cells)):
        label = cell_label(fresh.cells[index], index)
        if want.cell_type != have.cell_type:
            return label, f"cell type is {have.cell_type}, the solutions give {want.cell_type}"
        if want.source != have.source:
            return label, "source differs from what the solutions generate"
        if want.nbgrader != have.nbgrader:
            return label, "nbgrader metadata differs (points, ids or checksums)"
    if len(fresh_cells) != len(committed_cells):
        return "cells", f"the committed notebook has {len(committed_cells)} cells, the solutions give {len(fresh_cells)}"
    return None


def release_labs(solutions_dir: Path, labs_dir: Path, labs: list[str], *, check: bool,
                 display_root: Path, progress=None) -> list[Difference]:
    """Generate each lab's release; write it to labs_dir, or (check=True) return the differences.

    ``progress(lab)`` is called after each lab.
    """
    differences: list[Difference] = []
    with tempfile.TemporaryDirectory(prefix="course-release-") as scratch:
        workspace = Workspace.create(Path(scratch))
        for lab in labs:
            release_dir = generate_release(solutions_dir, lab, workspace)
            if check:
                differences.extend(compare_release(release_dir, labs_dir / lab, display_root))
            else:
                write_release(release_dir, labs_dir, lab)
            if progress:
                progress(lab)
    return differences
