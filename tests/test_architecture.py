"""The package's layout holds (docs/architecture.md): the library (``course_lib``) and the platform
(``autograde``) have no import circles, and the library never imports the platform, read from the
source (nothing imported), so a kit, which ships the library alone, works without the platform."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import cycles, describe_cycle, foreign_imports, import_edges

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("package", ["course_lib", "autograde"])
def test_the_library_and_the_platform_have_no_import_cycles(package):
    edges = import_edges(ROOT, package)
    assert edges, f"no imports read in {package}"
    found = cycles(edges)
    assert not found, f"import cycles in {package}:\n" + "\n".join(describe_cycle(c, edges) for c in found)


def test_the_library_never_imports_the_platform():
    found = foreign_imports(ROOT, "course_lib", "autograde")
    assert not found, "course_lib imports autograde (a kit has no autograde):\n" + "\n".join(
        f"  {edge.module}:{edge.line} -> {edge.target}{' (lazy)' if edge.lazy else ''}" for edge in found)
    assert foreign_imports(ROOT, "autograde", "course_lib"), "the reader of imports found none at all"
    assert not (ROOT / "course_lib" / "grading").exists(), "the platform moved to autograde/"


# The wings of docs/architecture.md, top to bottom; an import may only point down (or stay level).
TEACHING_AIDS = ("course_lib.checks", "course_lib.viz", "course_lib.sim", "course_lib.claims", "course_lib.chapters")
STUDENT_PLATFORM = ("course_lib.handin", "course_lib.runner", "course_lib.commands", "course_lib.cli")


def _wing(module: str) -> int:
    """2: the platform's student half, 1: the teaching aids, 0: the library."""
    if module.startswith(STUDENT_PLATFORM):
        return 2
    return 1 if module.startswith(TEACHING_AIDS) else 0


def test_imports_between_the_wings_point_downward_only():
    upward = [edge for edge in import_edges(ROOT, "course_lib") if _wing(edge.target) > _wing(edge.module)]
    assert not upward, "imports up the wings of docs/architecture.md:\n" + "\n".join(
        f"  {edge.module}:{edge.line} -> {edge.target}" for edge in upward)
    assert any(_wing(edge.module) == 1 and _wing(edge.target) == 0 for edge in import_edges(ROOT, "course_lib"))


def test_the_instructors_course_runs_every_command_and_the_students_only_theirs():
    from autograde import cli as instructor
    from course_lib import cli as student

    assert set(student.COMMANDS) == set(student.STUDENT_COMMANDS)
    assert set(instructor.COMMANDS) == set(student.COMMANDS) | set(instructor.PLATFORM_COMMANDS)
    assert set(instructor.PLATFORM_COMMANDS) == set(student.INSTRUCTOR_COMMANDS)
    for name in instructor.PLATFORM_COMMANDS:
        assert (ROOT / "autograde" / "commands" / f"{name}.py").is_file() and name not in student.COMMANDS
        assert not (ROOT / "course_lib" / "commands" / f"{name}.py").exists(), name
    for name in student.COMMANDS:
        assert (ROOT / "course_lib" / "commands" / f"{name}.py").is_file(), name


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import g\n")
    (package / "c.py").write_text("import pkg.a\n")
    assert cycles(import_edges(tmp_path, "pkg")) == [["pkg.a", "pkg.b"]]


def test_the_import_reader_finds_a_planted_import_of_another_package(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("import json\n")
    (package / "a.py").write_text("def f():\n    from other.sub import thing\n")
    (package / "b.py").write_text("import other\nimport otherwise\n")
    found = foreign_imports(tmp_path, "pkg", "other")
    assert [(edge.module, edge.target, edge.lazy) for edge in found] == [("pkg.a", "other.sub.thing", True),
                                                                          ("pkg.b", "other", False)]
