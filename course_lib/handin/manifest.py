"""What the release of each notebook holds, so a student's copy can be compared with it.

A student edits the release notebooks in place (``labs/<lab>/<notebook>.ipynb`` in the kit), so the
kit cannot compare a notebook with a pristine copy of itself. Instead ``course kit`` writes a
manifest, ``course_lib/_release.json``, built from the release by ``release_manifest``:

    {lab: {notebook: [{"grade_id", "kind": "answer" | "test" | "written", "points", "checksum",
                       "needs_gpu", "source" (test cells only)}, ...]}}

in the order of the notebook's cells (a ``written`` cell is a written answer a TA grades: a Markdown
cell with nbgrader's grade and solution set; its release source is the stub, never an answer). ``checksum`` is the one nbgrader stores in the release's
cell metadata (``nbgrader.utils.compute_checksum``: the cell's source and grading metadata), so
an edited test cell, or an answer cell still as released, is found by recomputing it. Test-cell
sources are public (they are the visible tests); ``course check`` runs them as released, as the
grader does. In the instructor's repository there is no manifest file: ``load_manifest`` builds
it from ``labs/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

__all__ = ["MANIFEST_FILE", "NotebookCell", "example_in", "example_notebook", "load_manifest", "release_manifest", "write_manifest"]

MANIFEST_FILE = Path(__file__).resolve().parent.parent / "_release.json"

NotebookCell = dict  # one entry of the manifest (see the module docstring)


def _cells(path: Path) -> list[NotebookCell]:
    from course_lib.handin.notebooks import is_written_answer, nbgrader_meta, needs_gpu

    cells = []
    for cell in nbformat.read(path, as_version=4).cells:
        meta = nbgrader_meta(cell)
        if is_written_answer(cell):
            cells.append({"grade_id": meta["grade_id"], "kind": "written", "points": float(meta.get("points") or 0),
                          "checksum": meta.get("checksum", ""), "needs_gpu": False})
            continue
        if cell.cell_type != "code" or not (meta.get("solution") or meta.get("grade")):
            continue
        entry = {"grade_id": meta["grade_id"], "kind": "test" if meta.get("grade") else "answer",
                 "points": float(meta.get("points") or 0), "checksum": meta.get("checksum", ""),
                 "needs_gpu": needs_gpu(cell)}
        if entry["kind"] == "test":
            entry["source"] = cell.source
        cells.append(entry)
    return cells


def release_manifest(labs_dir: Path, labs: list[str] | None = None) -> dict[str, dict[str, list[NotebookCell]]]:
    """The manifest of the release notebooks in ``labs_dir/<lab>/`` (every lab folder, or ``labs``)."""
    from course_lib.handin.notebooks import LAB_NAME

    labs_dir = Path(labs_dir)
    chosen = labs if labs is not None else sorted(
        path.name for path in labs_dir.iterdir() if path.is_dir() and LAB_NAME.match(path.name))
    return {lab: {path.stem: _cells(path) for path in sorted((labs_dir / lab).glob("*.ipynb"))} for lab in chosen}


def write_manifest(kit_folder: Path, labs: list[str]) -> Path:
    """Write the manifest of the kit's release notebooks next to its student edition of course_lib."""
    path = Path(kit_folder) / "course_lib" / MANIFEST_FILE.name
    path.write_text(json.dumps(release_manifest(Path(kit_folder) / "labs", labs), indent=1) + "\n",
                    encoding="utf-8")
    return path


def load_manifest() -> dict[str, dict[str, list[NotebookCell]]]:
    """The kit's manifest, or in the instructor's repository one built from its ``labs/``.

    Raises FileNotFoundError with what to do when neither exists.
    """
    if MANIFEST_FILE.is_file():
        return json.loads(MANIFEST_FILE.read_text(encoding="utf-8"))
    repo_labs = MANIFEST_FILE.parent.parent / "labs"
    if (MANIFEST_FILE.parent.parent / "solutions").is_dir() and repo_labs.is_dir():
        return release_manifest(repo_labs)
    raise FileNotFoundError(
        f"{MANIFEST_FILE} is missing, so the release notebooks are unknown: this copy of course_lib is not a "
        "student kit built by `course kit` (nor the course repository). Ask your instructor for the kit.")


INSTRUCTOR_EXAMPLE = ("lab01-text-to-tensors", "04_paging")


def example_in(manifest: dict, locked) -> tuple[str, str]:
    """(lab, notebook stem) to show in help texts for a kit with this manifest and these locked labs:
    the first chapter of the first lab students work on (a locked one), so a Lab 0.3 kit never shows
    a Lab 0.1 path."""
    labs = [lab for lab in manifest if manifest[lab]]
    if not labs:
        return INSTRUCTOR_EXAMPLE
    lab = next((lab for lab in labs if lab in locked), labs[0])
    return lab, sorted(manifest[lab])[0]


def example_notebook() -> tuple[str, str]:
    """``example_in`` for this copy of the library: its kit's manifest, or Lab 0.1's paging chapter."""
    if not MANIFEST_FILE.is_file():
        return INSTRUCTOR_EXAMPLE
    from course_lib.exercises import locked_labs

    try:
        manifest = json.loads(MANIFEST_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return INSTRUCTOR_EXAMPLE
    return example_in(manifest, locked_labs())
