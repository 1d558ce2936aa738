"""A class handed in through an LMS, with the mistakes a real term brings, on the fixture lab.

``canvas_download(folder)`` writes what an instructor finds after Canvas's "Download Submissions"
(``<name>[_LATE]_<user id>_<submission id>_<file>``) for the fixture lab (``grading_fixture``: two
chapters, 8 points on a CPU), with a few folders and zips collected by hand beside it, and returns
the class's roster (Canvas's gradebook export) and receipt times (the LMS's submission times):

========================================================  ============================================
entry                                                     what it is
========================================================  ============================================
``smithalice_101_5001_s1234567-20260112T220000Z.zip``     Alice, correct, typed the README's example id
``jonesbob_LATE_102_5002_s1234567-20260113T090000Z.zip``  Bob, correct, the same id, 9 h late
``whitecarol_103_5003_carol-20260112T210000Z.zip``        Carol, correct, ``ch1`` renamed ``ch1-Copy1``
``browndave_104_5004_ch1.ipynb``                          Dave uploaded one notebook, not a zip
``ch2.ipynb``                                             a notebook with no name of a student's
``blackerin_105_5005_erin.rar``                           Erin handed in a .rar
``greenfrank_106_5006_frank-20260112T200000Z.zip``        Frank's zip, truncated by the upload
``grace/``                                                Grace's notebooks, with no lab folder
``henry-20260112T100000Z.zip``                            Henry (by hand), passes visible tests only
``mallory-henry-20260112T230000Z.zip``                    Mallory's zip: a blank ``henry/``, later
``notes.txt``                                             the instructor's own notes
========================================================  ============================================

Ivy is on the roster and handed in nothing.
"""

from __future__ import annotations

import copy
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tests.grading_fixture import LAB, fixture_notebooks

DUE = "2026-01-12T23:59Z"
LATE_RULE = "10%/day,max=50%"
ASSIGNMENT = "Lab 0 fixture (7771)"   # the column of the instructor's assignment in Canvas's gradebook
STAMPS = {"alice": "2026-01-12 22:00:00.000000 UTC", "bob": "2026-01-12 23:00:00.000000 UTC",   # bob's claim: a lie
          "carol": "2026-01-12 21:00:00.000000 UTC", "henry": "2026-01-12 10:00:00.000000 UTC",
          "mallory": "2026-01-12 23:00:00.000000 UTC"}
ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Lab 0 fixture (7771),Essay (7772)
    Points Possible,,,,,8,10
"Smith, Alice",101,S-1001,asmith,A,,
"Jones, Bob",102,S-1002,bjones,A,,
"White, Carol",103,S-1003,carol,A,,
"Brown, Dave",104,S-1004,dbrown,B,,
"Black, Erin",105,S-1005,eblack,B,,
"Green, Frank",106,S-1006,fgreen,B,,
"Hall, Grace",107,S-1007,grace,B,,
"Ito, Henry",108,S-1008,henry,B,,
"Jung, Ivy",109,S-1009,ivy,B,,
"Student, Test",999,,,,,
"""
# Canvas's submissions, as an export of its submission times (Canvas's API: submitted_at).
RECEIVED = """ID,submitted_at
101,2026-01-12T22:00:05Z
102,2026-01-13T09:00:10Z
103,2026-01-12T21:00:07Z
104,2026-01-12T23:10:00Z
"""
# What each student's grade is once graded with DUE, LATE_RULE and the roster: (score, max) on a CPU.
EXPECTED = {"asmith": (8, 8), "bjones": (7.2, 8), "carol": (8, 8), "dbrown": (6, 8), "grace": (8, 8),
            "henry": (5, 8)}
WRONG_HIDDEN = "def add_one(x):\n    return 2 if x == 1 else 0"   # right on the visible input only


def notebook(chapter: str, answers: str | dict = "solution") -> bytes:
    """A fixture chapter as a student hands it in: the reference answers, "blank" (the stubs), or some replaced."""
    source = copy.deepcopy(fixture_notebooks()[chapter])
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution") or meta.get("grade"):
            continue
        if answers == "blank":
            cell.source = f"def {meta['grade_id']}(x):\n    raise NotImplementedError()"
        elif isinstance(answers, dict) and meta["grade_id"] in answers:
            cell.source = answers[meta["grade_id"]]
    return nbformat.writes(source).encode()


def hand_in_zip(path: Path, student: str, files: dict[str, bytes], stamp: str | None = None, *,
                lab: str = LAB) -> Path:
    """A zip as ``course submit --zip`` writes it: ``<student>/<lab>/<file>`` and timestamp.txt."""
    with zipfile.ZipFile(path, "w") as zipped:
        for name, data in files.items():
            zipped.writestr(f"{student}/{lab}/{name}", data)
        if stamp:
            zipped.writestr(f"{student}/{lab}/timestamp.txt", stamp + "\n")
    return path


def truncated_zip(path: Path, student: str) -> Path:
    """A hand-in zip cut off half way, as a failed upload leaves it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr(f"{student}/{LAB}/ch1.ipynb", notebook("ch1"))
        zipped.writestr(f"{student}/{LAB}/ch2.ipynb", notebook("ch2"))
    data = buffer.getvalue()
    path.write_bytes(data[:len(data) // 2])
    return path


@dataclass
class LmsClass:
    folder: Path
    roster: Path
    received: Path


def canvas_download(root: Path) -> LmsClass:
    """Write the class of the module docstring under ``root``: ``root/download``, ``roster.csv``, ``received.csv``."""
    folder = root / "download"
    folder.mkdir(parents=True)
    both = {"ch1.ipynb": notebook("ch1"), "ch2.ipynb": notebook("ch2")}
    hand_in_zip(folder / "smithalice_101_5001_s1234567-20260112T220000Z.zip", "s1234567", both, STAMPS["alice"])
    hand_in_zip(folder / "jonesbob_LATE_102_5002_s1234567-20260113T090000Z.zip", "s1234567", both, STAMPS["bob"])
    hand_in_zip(folder / "whitecarol_103_5003_carol-20260112T210000Z.zip", "carol",
                {"ch1-Copy1.ipynb": notebook("ch1"), "ch2.ipynb": notebook("ch2")}, STAMPS["carol"])
    (folder / "browndave_104_5004_ch1.ipynb").write_bytes(notebook("ch1"))
    (folder / "ch2.ipynb").write_bytes(notebook("ch2"))
    (folder / "blackerin_105_5005_erin.rar").write_bytes(b"Rar!\x1a\x07\x00" + b"\0" * 64)
    truncated_zip(folder / "greenfrank_106_5006_frank-20260112T200000Z.zip", "frank")
    (folder / "grace").mkdir()
    for name, data in both.items():
        (folder / "grace" / name).write_bytes(data)
    henry = {"ch1.ipynb": notebook("ch1", {"add_one": WRONG_HIDDEN}), "ch2.ipynb": notebook("ch2")}
    hand_in_zip(folder / "henry-20260112T100000Z.zip", "henry", henry, STAMPS["henry"])
    hand_in_zip(folder / "mallory-henry-20260112T230000Z.zip", "henry",
                {"ch1.ipynb": notebook("ch1", "blank"), "ch2.ipynb": notebook("ch2", "blank")}, STAMPS["mallory"])
    (folder / "notes.txt").write_text("grade these by Friday\n")
    (root / "roster.csv").write_text(ROSTER)
    (root / "received.csv").write_text(RECEIVED)
    return LmsClass(folder, root / "roster.csv", root / "received.csv")


def report_entries(out: Path) -> dict[str, dict]:
    report = json.loads((out / "report.json").read_text())
    return {entry["student"]: entry for entry in report["submissions"]}


def intake_by_entry(out: Path) -> dict[str, dict]:
    report = json.loads((out / "report.json").read_text())
    return {line["entry"]: line for line in report["intake"]}
