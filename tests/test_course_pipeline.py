"""The real course through the pipeline: release in sync, solutions run, demo submissions score as specified."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograde.demos import DEMO_SPECS, DEMO_SUBMISSIONS, load_demo_students
from autograde.layout import list_labs
from course_lib.handin.notebooks import autograded_cells, grade_cells, nbgrader_meta

ROOT = Path(__file__).resolve().parent.parent
LABS = list_labs(ROOT / "solutions")


def course(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_every_command_has_help():
    from autograde.cli import COMMANDS

    top = course("--help")
    assert top.returncode == 0 and all(name in top.stdout for name in COMMANDS)
    for name in COMMANDS:
        result = course(name, "--help")
        assert result.returncode == 0, f"course {name} --help failed: {result.stderr}"
        assert "usage: course " + name in result.stdout


def test_there_is_at_least_one_lab():
    assert LABS, "solutions/ holds no lab"


@pytest.mark.slow
def test_release_is_in_sync_with_solutions():
    result = course("release", "--check", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("lab", LABS)
def test_release_holds_no_solutions_or_hidden_tests(lab):
    for path in sorted((ROOT / "labs" / lab).glob("*.ipynb")):
        text = path.read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, path


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("lab*/*.ipynb")), ids=lambda p: p.stem)
def test_notebook_header_announces_its_points(path):
    notebook = nbformat.read(path, as_version=4)
    total = sum(float(nbgrader_meta(cell)["points"]) for cell in grade_cells(notebook))
    header = notebook.cells[0].source
    assert notebook.cells[0].cell_type == "markdown"
    announced = re.search(r"(\d+(?:\.\d+)?)\s*points", header)
    assert announced, f"{path.name}: the first cell should announce the total points"
    assert float(announced.group(1)) == total, f"{path.name}: header says {announced.group(1)}, cells add up to {total:g}"
    assert re.search(r"(\d+)\s*(?:-\s*\d+\s*)?min", header), f"{path.name}: the first cell should give an estimated time"


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("lab*/*.ipynb")), ids=lambda p: p.stem)
def test_every_answer_is_graded_by_a_visible_and_a_hidden_test(path):
    notebook = nbformat.read(path, as_version=4)
    answers = [nbgrader_meta(c)["grade_id"] for c in notebook.cells
               if nbgrader_meta(c).get("solution") and c.cell_type == "code"]
    tests = autograded_cells(notebook)   # a written answer is a TA's, not a test cell
    assert answers and tests
    assert any("BEGIN HIDDEN TESTS" in c.source for c in tests), f"{path.name} has no hidden tests"
    for cell in tests:
        assert "course_lib.checks" in cell.source or "check" in cell.source, \
            f"{path.name}: test cell {nbgrader_meta(cell)['grade_id']} does not call a check"


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("lab*/*.ipynb")), ids=lambda p: p.stem)
def test_gpu_cells_say_so_in_their_metadata(path):
    """The grader skips a GPU cell on a CPU from its metadata alone: a cell that needs a GPU must carry it."""
    for cell in grade_cells(nbformat.read(path, as_version=4)):
        if "require_gpu(" in cell.source:
            assert cell.metadata.get("course", {}).get("needs_gpu"), \
                f"{path.name}: {nbgrader_meta(cell)['grade_id']} calls require_gpu but lacks needs_gpu=True"


def test_every_notebook_has_a_buggy_demo_student():
    for lab in LABS:
        notebooks = {path.stem for path in (ROOT / "solutions" / lab).glob("*.ipynb")}
        students = [s for s in load_demo_students(ROOT / DEMO_SPECS / lab) if s.name.startswith("buggy")]
        covered = {name for student in students for name in student.expected}
        assert notebooks <= covered, f"{lab}: no buggy demo student for {sorted(notebooks - covered)}"
        assert len(students) >= 3, f"{lab}: at least three buggy demo students"


def test_every_lab_has_an_attack_student():
    """The test suite grades these on every run; make demo-all grades every demo student."""
    for lab in LABS:
        students = load_demo_students(ROOT / DEMO_SPECS / lab)
        assert any(s.name == "attack-borrow-the-reference" for s in students), \
            f"{lab}: needs an attack-borrow-the-reference demo student"


def graded_max_scores(lab: str) -> dict[str, float]:
    """Each notebook's max_score on a CPU: its test cells' and written answers' points, GPU-only cells left out."""
    maxima = {}
    for path in sorted((ROOT / "solutions" / lab).glob("*.ipynb")):
        cells = grade_cells(nbformat.read(path, as_version=4))
        maxima[path.stem] = sum(float(nbgrader_meta(c)["points"]) for c in cells
                                if not c.metadata.get("course", {}).get("needs_gpu"))
    return maxima


# Graded on every run. The other attacks (a no-op'd check, a fake NeedsGPU, and those on the grader
# itself: limits, floods, a stall) are the same mechanisms test_grading_rules proves on its small
# fixture lab; make demo-all and test_grader_attacks.py (make test-full) grade them on the real labs.
# Borrowed platform helpers and the tokenizer's guard rest on the real edition: graded here.
SUITE_ATTACKS = ("attack-borrow-the-reference", "attack-read-secrets", "attack-borrow-platform-helpers",
                 "attack-tokenizer-guard")


@pytest.fixture(scope="module")
def attacks_graded(tmp_path_factory):
    """The suite's attack demo students of every lab, graded in one ``course grade`` run (one Dask pool)."""
    root = tmp_path_factory.mktemp("attacks")
    for lab in LABS:
        for student in load_demo_students(ROOT / DEMO_SPECS / lab):
            if student.name in SUITE_ATTACKS:
                shutil.copytree(ROOT / DEMO_SUBMISSIONS / student.name / lab, root / "submissions" / student.name / lab)
    out = root / "grades"
    result = course("grade", str(root / "submissions"), "--out", str(out), "--jobs", "2",
                    "--demo-specs", str(ROOT / DEMO_SPECS))
    return result, out


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS)
def test_attack_students_score_as_their_specs_say(lab, attacks_graded):
    """Hostile submissions of every lab, graded through ``course grade``, each against its spec.

    The reference answers (``correct``, full marks), ``blank`` (zero) and every buggy student are
    graded by ``make demo-all`` with ``--demo-specs``, which fails on any mismatch: too slow for every
    test run. Each student hands in only the notebooks its spec names.
    """
    result, out = attacks_graded
    report = json.loads((out / "report.json").read_text())
    scores = {(entry["student"], entry["lab"]): entry for entry in report["submissions"]}
    maxima = graded_max_scores(lab)
    for student in [s for s in load_demo_students(ROOT / DEMO_SPECS / lab) if s.name in SUITE_ATTACKS]:
        entry = scores[(student.name, lab)]
        by_notebook = {nb["name"]: nb for nb in entry["notebooks"]}
        assert student.expected, f"{student.name}: its spec needs EXPECTED scores"
        for notebook, expected in student.expected.items():
            graded = by_notebook[notebook]
            assert graded["max_score"] == maxima[notebook], \
                f"{student.name}/{notebook}: max_score {graded['max_score']}, the notebook is worth {maxima[notebook]}"
            assert 0 <= expected.auto <= maxima[notebook]
            assert graded["score"] == expected.auto, (
                f"{student.name}/{notebook}: expected {expected.auto}, got {graded['score']}; "
                f"lost: {entry['lost_points']}")
            assert graded["awaiting_ta"] == expected.awaiting_ta, f"{student.name}/{notebook}: points awaiting a TA"
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_probe_for_the_hidden_tests_finds_nothing(attacks_graded):
    _, out = attacks_graded
    feedback = "".join(path.read_text() for path in (out / "feedback" / "attack-read-secrets").rglob("*.html"))
    assert "searched; found 0 secrets" in feedback, "the probe ran, found nothing, and its output reached the feedback"
    assert "LEAKED /" not in feedback and "LEAKED .." not in feedback, "the probe printed an instructor file"
    assert "BEGIN HIDDEN TESTS" not in feedback and "SQLite format" not in feedback
    assert not Path("/tmp/course-escape.txt").exists() and not (Path.home() / "course-escape.txt").exists()
