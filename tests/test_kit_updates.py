"""Kits per deadline: ``course kit --force`` keeps the kit's git history, and ``make update`` takes the next
kit into a student's copy without ever overwriting a notebook they changed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograde.kit import build_kit, kit_files

ROOT = Path(__file__).resolve().parent.parent
LAB1, LAB2 = "lab01-text-to-tensors", "lab02-prefill-vs-decode"
NOTEBOOK = f"labs/{LAB1}/01_tokenization.ipynb"

pytestmark = pytest.mark.slow


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True).stdout


def update(student: Path, *args: str) -> subprocess.CompletedProcess:
    """What `make update` runs, with the system's Python (no package of the course on its path)."""
    return subprocess.run([sys.executable, "-I", "course_lib/handin/update.py", *args], cwd=student,
                          capture_output=True, text=True, timeout=120)


def students_work(student: Path) -> str:
    path = student / NOTEBOOK
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_markdown_cell("my notes on merges"))
    nbformat.write(notebook, path)
    return path.read_text()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_each_kit_is_a_commit_and_a_student_takes_the_next_one_without_losing_work(tmp_path):
    kit = tmp_path / "kit"
    first = build_kit(ROOT, kit, git=True)                                # the start of term: Lab 0.1
    assert first.labs == [LAB1] and first.commit
    readme = (kit / "README.md").read_text()
    assert "make update KIT=" in readme and "never overwrites" in readme
    assert "\nupdate:" in (kit / "Makefile").read_text()
    student = tmp_path / "student"
    subprocess.run(["git", "clone", "--quiet", str(kit), str(student)], check=True)
    mine = students_work(student)

    second = build_kit(ROOT, kit, unlock=[LAB1], force=True, archive=True)   # after Lab 0.1's deadline
    assert second.commit != first.commit and second.labs == [LAB1, LAB2]
    assert git(kit, "log", "--format=%s").splitlines() == [f"Kit: {LAB1}, {LAB2} (unlocked: {LAB1})",
                                                           f"Kit: {LAB1} (unlocked: none)"]
    assert ".git/" not in "\n".join(__import__("zipfile").ZipFile(second.archive).namelist())

    done = update(student)                                                # a git clone: fetched
    assert done.returncode == 0, done.stdout + done.stderr
    assert (student / NOTEBOOK).read_text() == mine, "the student's notebook is theirs"
    assert (student / "labs" / LAB2).is_dir() and (student / "KIT.json").read_text() == (kit / "KIT.json").read_text()
    for name, digest in json.loads((kit / "KIT.json").read_text())["files"].items():
        if name != NOTEBOOK:
            assert kit_files(student).get(name) == digest, f"{name} is the new kit's"

    # A copy of the first kit (no git) takes the zip; a notebook that both changed is kept, the kit's aside.
    copy = tmp_path / "copy"
    git(kit, "worktree", "add", "--quiet", "--detach", str(tmp_path / "first"), first.commit)
    shutil.copytree(tmp_path / "first", copy, ignore=shutil.ignore_patterns(".git"))
    students_work(copy)
    fixed = kit / NOTEBOOK
    notebook = nbformat.read(fixed, as_version=4)
    notebook.cells.insert(1, nbformat.v4.new_markdown_cell("Erratum: the merge rule, restated."))
    nbformat.write(notebook, fixed)
    manifest = json.loads((kit / "KIT.json").read_text())
    manifest["files"] = kit_files(kit)
    (kit / "KIT.json").write_text(json.dumps(manifest))
    planned = update(copy, str(kit), "--dry-run")
    assert f"{NOTEBOOK}: kept YOUR version" in planned.stdout and not (copy / "kit-updates").exists()
    done = update(copy, str(second.archive))
    assert done.returncode == 0, done.stderr
    assert "my notes on merges" in (copy / NOTEBOOK).read_text()
    assert (copy / "labs" / LAB2).is_dir()
    done = update(copy, str(kit))
    assert "Erratum" in (copy / "kit-updates" / NOTEBOOK).read_text() and "Erratum" not in (copy / NOTEBOOK).read_text()
