"""The record of a grading run: one file per student and lab, written the moment a result arrives.

``OUT/results/<lab>/<student>.json`` holds the lab result, the *key* it was graded under (the
submission's digest, the lab sources' digest, the grader's fingerprint, the cell time limit, GPU or
not) and what intake learned of the hand-in (``hand_in``: the SUBMISSIONS entry it came from, the
LMS's uploader, receipt time and late flag, flags such as an identity conflict);
``OUT/feedback/<student>/<lab>/`` the feedback pages, ``OUT/autograded/<student>/<lab>/`` the
autograded notebooks (for formgrader) and ``OUT/instructor/<lab>/<student>.json`` the instructor's
record of every lost point in full (``lost_points``; never copied anywhere a student looks). The pages and notebooks go in first, each folder swapped
in whole; the JSON file last, by a rename, so a result file on disk always means a complete
result, and a killed run loses only the submissions that were still being graded. Everything the
class sees (grades.csv, report.json, gradebook.db) is built from these files by one writer.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autograde.results import LabResult

__all__ = ["FORMAT", "ResultStore", "StoredResult", "atomic_write_bytes"]

FORMAT = 1


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``path`` so that a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _swap_folder(target: Path, files: dict[str, bytes]) -> None:
    """Replace the folder ``target`` by one holding exactly ``files`` (built aside, then renamed in)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    for name, data in files.items():
        (staging / name).write_bytes(data)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class StoredResult:
    """A result file: the lab result, the key it was graded under, and how grading went."""

    result: LabResult
    key: dict
    complete: bool           # False: grading itself failed (a worker died, ...); --resume grades it again
    worker: str | None = None
    elapsed_s: float | None = None
    graded_at: str | None = None
    hand_in: dict | None = None   # intake.HandIn.meta(): where it came from, the LMS's word on it

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "student": self.result.student, "lab": self.result.lab,
                           "key": self.key, "complete": self.complete, "worker": self.worker,
                           "elapsed_s": self.elapsed_s, "graded_at": self.graded_at, "hand_in": self.hand_in,
                           "result": self.result.as_dict()}, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "StoredResult":
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"result file format {data.get('format')!r}, expected {FORMAT}")
        hand_in = data.get("hand_in")
        return cls(LabResult.from_dict(data["result"]), data.get("key", {}), bool(data.get("complete")),
                   data.get("worker"), data.get("elapsed_s"), data.get("graded_at"),
                   hand_in if isinstance(hand_in, dict) else None)


class ResultStore:
    """The results folder of one output folder (``OUT``)."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)

    def result_path(self, lab: str, student: str) -> Path:
        return self.out_dir / "results" / lab / f"{student}.json"

    def feedback_dir(self, lab: str, student: str) -> Path:
        return self.out_dir / "feedback" / student / lab

    def autograded_dir(self, lab: str, student: str) -> Path:
        return self.out_dir / "autograded" / student / lab

    def instructor_path(self, lab: str, student: str) -> Path:
        return self.out_dir / "instructor" / lab / f"{student}.json"

    def load_instructor_record(self, lab: str, student: str) -> dict | None:
        """{notebook: lost_points record} of one result, or None when there is none."""
        try:
            return json.loads(self.instructor_path(lab, student).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def load(self, lab: str, student: str) -> StoredResult | None:
        """The stored result, or None when there is none (or it is unreadable: then it is graded again)."""
        path = self.result_path(lab, student)
        try:
            return StoredResult.from_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, stored: StoredResult, *, feedback: dict[str, str] | None = None,
             autograded: dict[str, bytes] | None = None, instructor: dict | None = None) -> Path:
        """Write one result: feedback pages, autograded notebooks and the instructor's record first, the
        result file last."""
        result = stored.result
        if feedback is not None:
            pages = {f"{name}.html": html.encode("utf-8") for name, html in feedback.items()}
            _swap_folder(self.feedback_dir(result.lab, result.student), pages)
            for notebook in result.notebooks:
                notebook.feedback = (str(Path("feedback", result.student, result.lab, f"{notebook.name}.html"))
                                     if notebook.name in feedback else None)
        if autograded is not None:
            _swap_folder(self.autograded_dir(result.lab, result.student),
                         {f"{name}.ipynb": data for name, data in autograded.items()})
        if instructor is not None:
            atomic_write_bytes(self.instructor_path(result.lab, result.student),
                               json.dumps(instructor, indent=1, ensure_ascii=False).encode("utf-8"))
        path = self.result_path(result.lab, result.student)
        atomic_write_bytes(path, stored.to_json().encode("utf-8"))
        return path

    def all(self) -> tuple[list[StoredResult], list[str]]:
        """Every readable result file, ordered by lab and student, and the unreadable ones (by path)."""
        results, unreadable = [], []
        folder = self.out_dir / "results"
        for path in sorted(folder.glob("*/*.json")) if folder.is_dir() else []:
            try:
                results.append(StoredResult.from_json(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as error:
                unreadable.append(f"{path.relative_to(self.out_dir)}: unreadable ({error}); grade it again")
        results.sort(key=lambda stored: (stored.result.lab, stored.result.student))
        return results, unreadable
