"""The instructor guide's "Your first term", run command by command, as the guide gives them.

Every ``course`` command of the section's code blocks runs, in order, and must succeed. The kits are
built from this repository; the grading commands run in a course folder whose Lab 0.1 is the fixture
lab (``grading_fixture``: two short chapters, seconds to grade) under Lab 0.1's name, on a Canvas
download of three students (``lms_fixture``): so the walk-through costs about a minute, not the
minutes each real chapter takes.
"""

from __future__ import annotations

import csv
import io
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.grading_fixture import fixture_notebooks
from tests.lms_fixture import WRONG_HIDDEN, hand_in_zip, notebook

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "book" / "instructor-guide.md"
LAB = "lab01-text-to-tensors"
ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Lab 0.1 (4242)
    Points Possible,,,,,8
"Doe, Jane",301,S-3001,jdoe,A,
"Roe, Rick",302,S-3002,rroe,A,
"Poe, Paula",303,S-3003,ppoe,A,
"""

pytestmark = pytest.mark.slow


def walkthrough_commands() -> list[str]:
    """The ``course`` commands of the guide's "Your first term", in order (continued lines joined)."""
    section = GUIDE.read_text().split("## Your first term", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            assert line.startswith("course "), f"the walk-through runs only course commands: {line}"
            commands.append(line)
    return commands


def canvas_submissions(zip_path: Path) -> None:
    """Canvas's submissions.zip of Lab 0.1: Jane passes the visible checks only, Rick's is blank, Paula renamed
    a notebook."""
    files = {}
    scratch = zip_path.parent / "scratch"
    scratch.mkdir()
    both = {"ch1.ipynb": notebook("ch1", {"add_one": WRONG_HIDDEN}), "ch2.ipynb": notebook("ch2")}
    blank = {"ch1.ipynb": notebook("ch1", "blank"), "ch2.ipynb": notebook("ch2", "blank")}
    for name, student, hand_in in (("doejane_301_7001_jdoe-20261002T200000Z.zip", "jdoe", both),
                                   ("roerick_302_7002_rroe-20261002T210000Z.zip", "rroe", blank),
                                   ("poepaula_303_7003_ppoe-20261002T220000Z.zip", "ppoe",
                                    {"ch1-Copy1.ipynb": notebook("ch1"), "ch2.ipynb": notebook("ch2")})):
        files[name] = hand_in_zip(scratch / name, student, hand_in, "2026-10-02 20:00:00.000000 UTC",
                                  lab=LAB).read_bytes()
    with zipfile.ZipFile(zip_path, "w") as bulk:
        for name, data in files.items():
            bulk.writestr(name, data)


def test_the_guides_first_term_runs_as_written(tmp_path):
    import nbformat

    commands = walkthrough_commands()
    assert [c.split()[1] for c in commands] == ["kit", "grade", "why", "adjust", "grade", "export", "kit"]
    # The instructor's folder: a course whose Lab 0.1 is the fixture lab, the Canvas downloads beside it.
    course_dir = tmp_path / "term"
    (course_dir / "solutions" / LAB).mkdir(parents=True)
    for name, source in fixture_notebooks().items():
        nbformat.write(source, course_dir / "solutions" / LAB / f"{name}.ipynb")
    (course_dir / "course_lib").symlink_to(ROOT / "course_lib")
    canvas_submissions(course_dir / "submissions.zip")
    (course_dir / "roster.csv").write_text(ROSTER)
    kits = tmp_path / "instructor"        # where the kit commands run: this repository's course
    kits.mkdir()
    runs = []
    for command in commands:
        argv = shlex.split(command, comments=True)[1:]
        cwd = kits if argv[0] == "kit" else course_dir
        run = subprocess.run([sys.executable, "-m", "autograde.cli", *argv], cwd=cwd, capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == 0, f"{command}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        runs.append(run)

    kit = tmp_path / "kit"
    log = subprocess.run(["git", "-C", str(kit), "log", "--oneline"], capture_output=True, text=True).stdout
    assert len(log.splitlines()) == 2, "each kit a commit of the same repository"
    first_grading, why, adjust, again, export = runs[1], runs[2], runs[3], runs[4], runs[5]
    assert re.search(r"poepaula_303_7003_ppoe-\S+ +graded +as ppoe/" + LAB, first_grading.stdout)
    assert "ppoe" in first_grading.stdout and "ch1 graded from ch1-Copy1.ipynb (renamed)" in first_grading.stdout
    assert "jdoe/" + LAB in why.stdout and "recorded event" in adjust.stdout
    assert "graded 0 of 3, 3 already graded (--resume)" in again.stdout
    rows = list(csv.reader(io.StringIO((course_dir / "canvas_import.csv").read_text())))
    assert rows[0][5:] == ["Lab 0.1 (4242)"], "the instructor's own column"
    assert {row[3]: row[5] for row in rows[2:]} == {"jdoe": "7", "rroe": "0", "ppoe": "8"}, "jdoe: the regrade's 7"
    assert "renamed notebooks" in export.stderr
