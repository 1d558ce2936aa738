"""What a grading task carries: a submission and a lab's sources as plain bytes, and their hashes.

A Dask worker may run on another machine, so a task never points at the instructor's folders: it
carries the submission's files (a *snapshot*, read once; the grade is of that snapshot), and the
lab's source notebooks travel once per lab. The hashes decide what ``course grade --resume`` may
skip: a stored result counts only if it was graded from the same submission bytes, the same lab
sources, the same grader code and the same settings.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import course_lib

__all__ = ["LabBundle", "Snapshot", "SnapshotError", "course_fingerprint", "digest_files", "folder_digest",
           "graded_files", "lab_bundle", "lab_needs_gpu", "take_snapshot"]

# What grading reads from a submission folder: the notebooks and the optional timestamp file.
TIMESTAMP_FILE = "timestamp.txt"
MAX_SUBMISSION_BYTES = 64 * 2**20   # a notebook folder larger than this is not a plausible submission


def graded_files(folder: Path) -> list[Path]:
    """The files of a submission folder that grading reads, in a stable order.

    Links are never followed: a link named like a notebook could point at the instructor's own
    notebook (hidden tests and all), which would then be copied into the student's kernel.
    """
    files = [path for path in folder.glob("*.ipynb") if path.is_file() and not path.is_symlink()]
    stamp = folder / TIMESTAMP_FILE
    if stamp.is_file() and not stamp.is_symlink():
        files.append(stamp)
    return sorted(files, key=lambda path: path.name)


def digest_files(files: dict[str, bytes]) -> str:
    """sha256 over names and contents (name, length, bytes), so no two different folders collide."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name]
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class Snapshot:
    """A submission folder as read at one moment: file name -> bytes, and their digest."""

    student: str
    lab: str
    files: dict[str, bytes] = field(repr=False)
    digest: str
    taken_at: float

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())


class SnapshotError(OSError):
    """The submission folder could not be read (it vanished, or is too large); the message says why."""


def take_snapshot(student: str, lab: str, folder: Path) -> Snapshot:
    """Read the graded files of ``folder`` (``*.ipynb`` and ``timestamp.txt``) into memory."""
    if not folder.is_dir():
        raise SnapshotError(f"{student}/{lab}: the submission folder is gone ({folder})")
    files: dict[str, bytes] = {}
    total = 0
    for path in graded_files(folder):
        try:
            data = path.read_bytes()
        except OSError as error:
            raise SnapshotError(f"{student}/{lab}: {path.name} could not be read: {error.strerror}") from None
        total += len(data)
        if total > MAX_SUBMISSION_BYTES:
            raise SnapshotError(f"{student}/{lab}: the notebooks add up to more than "
                                f"{MAX_SUBMISSION_BYTES // 2**20} MiB; not graded")
        files[path.name] = data
    return Snapshot(student, lab, files, digest_files(files), time.time())


def folder_digest(folder: Path) -> str | None:
    """The digest a snapshot of ``folder`` would have now (None if it cannot be read)."""
    try:
        return digest_files({path.name: path.read_bytes() for path in graded_files(folder)})
    except OSError:
        return None


@dataclass(frozen=True)
class LabBundle:
    """A lab's source folder (``solutions/<lab>``) as bytes: what a worker needs to prepare the lab."""

    lab: str
    files: dict[str, bytes] = field(repr=False)   # relative POSIX path -> bytes
    digest: str
    # A workspace where generate_assignment already ran for this lab (gradebook.db, source/, release/),
    # made once by the machine that sends the work: a worker copies it instead of running nbgrader.
    prepared: dict[str, bytes] = field(default_factory=dict, repr=False)

    def notebook_names(self) -> list[str]:
        return sorted(Path(name).stem for name in self.files if "/" not in name and name.endswith(".ipynb"))

    def write(self, solutions_dir: Path) -> Path:
        """Recreate ``solutions_dir/<lab>`` from the bundle; returns that folder."""
        lab_dir = solutions_dir / self.lab
        for name, data in self.files.items():
            path = lab_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return lab_dir


    def write_prepared(self, workspace_root: Path) -> bool:
        """Lay the prepared workspace files into ``workspace_root``; False when the bundle has none."""
        write_workspace_files(workspace_root, self.prepared)
        return bool(self.prepared)


def write_workspace_files(workspace_root: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (relative POSIX path -> bytes, as ``prepared_workspace_files`` made them)."""
    for name, data in files.items():
        path = workspace_root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


# Prepared workspaces made by this process, by (lab, digest of its sources): the gradebook merged at
# the end of a run starts from the one the run prepared instead of running nbgrader again.
_PREPARED_HERE: dict[tuple[str, str], dict[str, bytes]] = {}


def prepared_workspace_files(workspace_root: Path, lab: str, digest: str) -> dict[str, bytes]:
    """What ``generate_assignment`` left for ``lab`` in a workspace: its gradebook, source and release
    (also remembered for ``prepared_earlier``)."""
    files = {"gradebook.db": (workspace_root / "gradebook.db").read_bytes()}
    for part in ("source", "release"):
        folder = workspace_root / part / lab
        files.update({path.relative_to(workspace_root).as_posix(): path.read_bytes()
                      for path in sorted(folder.rglob("*")) if path.is_file()})
    _PREPARED_HERE[(lab, digest)] = files
    return files


def prepared_earlier(solutions_dir: Path, lab: str) -> dict[str, bytes] | None:
    """The workspace files this process prepared for ``lab``, if its sources have not changed since."""
    return _PREPARED_HERE.get((lab, lab_bundle(solutions_dir, lab).digest))


_SKIPPED_PARTS = {".ipynb_checkpoints", "__pycache__"}


def lab_bundle(solutions_dir: Path, lab: str) -> LabBundle:
    lab_dir = solutions_dir / lab
    files = {path.relative_to(lab_dir).as_posix(): path.read_bytes()
             for path in sorted(lab_dir.rglob("*"))
             if path.is_file() and not _SKIPPED_PARTS & set(path.relative_to(lab_dir).parts)}
    return LabBundle(lab, files, digest_files(files))


def lab_needs_gpu(bundle: LabBundle) -> bool:
    """Does any source notebook of the lab have a test cell marked GPU-only (``needs_gpu``)?"""
    import json

    for name, data in bundle.files.items():
        if "/" in name or not name.endswith(".ipynb"):
            continue
        for cell in json.loads(data.decode("utf-8")).get("cells", []):
            if cell.get("metadata", {}).get("course", {}).get("needs_gpu"):
                return True
    return False


# autograde's folders of data, not code: the demo students' specs and notebooks.
_DATA_FOLDERS = ("demo", "demo_submissions")


def course_fingerprint() -> str:
    """``<version>+<hash>`` of the installed course_lib's and autograde's Python source: equal on two
    machines exactly when they grade with the same code (what the worker check and ``--resume`` compare)."""
    import autograde

    files = {}
    for module in (course_lib, autograde):
        package = Path(module.__file__).resolve().parent
        files |= {f"{package.name}/{path.relative_to(package).as_posix()}": path.read_bytes()
                  for path in sorted(package.rglob("*.py"))
                  if "__pycache__" not in path.parts and path.relative_to(package).parts[0] not in _DATA_FOLDERS}
    return f"{course_lib.__version__}+{digest_files(files)[:12]}"
