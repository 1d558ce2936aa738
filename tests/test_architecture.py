"""The package's layout holds: the library's imports have no circles (read from the source, nothing imported)."""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import cycles, describe_cycle, import_edges

ROOT = Path(__file__).resolve().parent.parent


def test_the_library_has_no_import_cycles():
    platform = ("course_lib.grading", "course_lib.commands", "course_lib.handin")   # moving to autograde/
    edges = [edge for edge in import_edges(ROOT, "course_lib") if not edge.module.startswith(platform)]
    found = cycles(edges)
    assert not found, "import cycles in course_lib:\n" + "\n".join(describe_cycle(c, edges) for c in found)


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import g\n")
    (package / "c.py").write_text("import pkg.a\n")
    assert cycles(import_edges(tmp_path, "pkg")) == [["pkg.a", "pkg.b"]]
