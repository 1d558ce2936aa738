"""``course submit``: a student's notebooks in the layout ``course grade`` reads, as a folder or a zip.

The layout is ``<student>/<lab>/<notebook>.ipynb`` plus ``<student>/<lab>/timestamp.txt`` (the
file ``nbgrader submit`` writes; the grader puts it in grades.csv and the gradebook). A zip is
named ``<student>-<UTC time>.zip`` and holds exactly that tree, so ``course grade`` accepts the zip
itself, or a folder of them (the latest hand-in of a student's lab wins).

Only the release's notebooks of each lab go in, under their release names; a notebook that is not
valid notebook JSON stops the hand-in (the grader would score it zero), and edited test cells or
copied graded cells are reported (the grader puts the released test cells back).
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from course_lib.handin.manifest import load_manifest

__all__ = ["HandIn", "SubmitError", "changed_labs", "plan_hand_in", "write_folder", "write_zip"]

TIMESTAMP_FILE = "timestamp.txt"


class SubmitError(ValueError):
    """A hand-in that cannot be made; the message says what to fix."""


@dataclass
class HandIn:
    """What goes in: (lab, release notebook name, file) and what to tell the student."""

    student: str
    files: list[tuple[str, str, Path]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    taken_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def labs(self) -> list[str]:
        return list(dict.fromkeys(lab for lab, _, _ in self.files))

    def timestamp(self) -> str:
        """nbgrader's timestamp.txt format (UTC)."""
        return self.taken_at.strftime("%Y-%m-%d %H:%M:%S.%f UTC")

    def entries(self):
        """(path inside the hand-in, file on disk or text) for every file, in order."""
        for lab in self.labs:
            for entry_lab, name, path in self.files:
                if entry_lab == lab:
                    yield f"{self.student}/{lab}/{name}.ipynb", path
            yield f"{self.student}/{lab}/{TIMESTAMP_FILE}", self.timestamp() + "\n"


def _answer_changed(path: Path, release) -> bool:
    from nbgrader.utils import compute_checksum

    from course_lib.handin.notebooks import MalformedNotebook, nbgrader_meta, read_notebook

    try:
        notebook = read_notebook(path)
    except MalformedNotebook:
        return True   # something was done to it: let plan_hand_in say what is wrong
    checksums = {cell["grade_id"]: cell["checksum"] for cell in release if cell["kind"] in ("answer", "written")}
    return any(nbgrader_meta(cell).get("grade_id") in checksums
               and compute_checksum(cell) != checksums[nbgrader_meta(cell)["grade_id"]] for cell in notebook.cells)


def changed_labs(labs_dir: Path, manifest: dict | None = None) -> list[str]:
    """Labs in which at least one answer cell differs from the release (the labs worth handing in)."""
    manifest = load_manifest() if manifest is None else manifest
    return [lab for lab, notebooks in manifest.items()
            if any((Path(labs_dir) / lab / f"{name}.ipynb").is_file()
                   and _answer_changed(Path(labs_dir) / lab / f"{name}.ipynb", cells) for name, cells in notebooks.items())]


def plan_hand_in(student: str, labs_dir: Path, labs: list[str] | None = None, manifest: dict | None = None) -> HandIn:
    """Which files go in for ``labs`` (default: the labs you changed), checked; SubmitError when impossible."""
    from course_lib.handin.check import inspect_file
    from course_lib.handin.notebooks import SAFE_ID

    if not SAFE_ID.match(student or ""):
        raise SubmitError(f"--student {student!r}: a student id is 1 to 100 letters, digits and . _ @ + - "
                          "(starting with a letter or digit), as your course uses it")
    manifest = load_manifest() if manifest is None else manifest
    labs_dir = Path(labs_dir)
    if not labs_dir.is_dir():
        raise SubmitError(f"{labs_dir} is not a folder: run this in your kit (the folder with labs/) or pass --labs-dir")
    if labs:
        unknown = [lab for lab in labs if lab not in manifest]
        if unknown:
            raise SubmitError(f"--lab {', '.join(unknown)}: not a lab of this kit; its labs: {', '.join(manifest)}")
    else:
        labs = changed_labs(labs_dir, manifest)
        if not labs:
            raise SubmitError(f"no notebook in {labs_dir} has a changed answer cell, so there is nothing to hand in "
                              "(save your notebooks in JupyterLab first), or name the lab with --lab")
    hand_in = HandIn(student)
    broken = []
    for lab in labs:
        for name in manifest[lab]:
            path = labs_dir / lab / f"{name}.ipynb"
            if not path.is_file():
                hand_in.notes.append(f"{lab}/{name}.ipynb is missing: its cells score zero")
                continue
            _, _, _, checks = inspect_file(path, manifest)
            for check in checks:
                if check.what == "JSON" and not check.ok:
                    broken.append(f"{lab}/{name}.ipynb: {check.detail}")
                elif not check.ok:
                    hand_in.notes.append(f"{lab}/{name}.ipynb: {check.what}: {check.detail}")
            hand_in.files.append((lab, name, path))
        others = sorted(path.name for path in (labs_dir / lab).glob("*.ipynb") if path.stem not in manifest[lab])
        if others:
            hand_in.notes.append(f"{lab}: left out {', '.join(others)} (not a notebook of the lab; the grader "
                                 "reads only the released names)")
    if broken:
        raise SubmitError("these notebooks are not valid notebook files, and the grader would score them zero:\n  "
                          + "\n  ".join(broken))
    return hand_in


def write_folder(hand_in: HandIn, out: Path) -> Path:
    """Write ``out/<student>/<lab>/...``; a lab folder this command wrote before is replaced."""
    out = Path(out)
    for lab in hand_in.labs:
        target = out / hand_in.student / lab
        if target.exists():
            foreign = [p.name for p in target.iterdir() if p.suffix != ".ipynb" and p.name != TIMESTAMP_FILE]
            if foreign or not target.is_dir():
                raise SubmitError(f"{target} exists and holds other files ({', '.join(foreign[:5])}); "
                                  "choose another --out")
            shutil.rmtree(target)
    for name, content in hand_in.entries():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, path)
        else:
            path.write_text(content, encoding="utf-8")
    return out / hand_in.student


def write_zip(hand_in: HandIn, out_dir: Path) -> Path:
    """Write ``out_dir/<student>-<UTC time>.zip`` holding ``<student>/<lab>/...``; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{hand_in.student}-{hand_in.taken_at.strftime('%Y%m%dT%H%M%SZ')}.zip"
    stamp = hand_in.taken_at.timetuple()[:6]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, content in hand_in.entries():
            data = content.read_bytes() if isinstance(content, Path) else content.encode("utf-8")
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zipped.writestr(info, data)
    return archive
