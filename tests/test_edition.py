"""The student edition of course_lib: stubs where the references of locked labs were, nothing else changed."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import course_lib
from autograde.edition import StubError, build_edition, marked_definitions, stub_source
from course_lib.exercises import LABS, Exercise, exercise, exercise_of
from course_lib.handin.notebooks import nbgrader_meta

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(course_lib.__file__).resolve().parent

SOURCE = textwrap.dedent('''
    import triton
    from course_lib.exercises import exercise


    @exercise("lab01-text-to-tensors", "01_tokenization", "train_bpe")
    def train_bpe(text, vocab_size):
        """Train."""
        # the merge loop: the secret sauce
        merges = {}
        return merges


    def platform_helper():
        return "kept"


    @exercise("lab01-text-to-tensors", "04_paging", "block_allocator")
    class BlockAllocator:
        """Blocks."""

        LIMIT = 3

        def __init__(self, num_blocks):
            self.num_blocks = num_blocks

        @property
        def num_free_blocks(self):
            """How many."""
            return self.num_blocks


    @exercise("lab03-kernels", "01_triton", "vector_add")
    @triton.jit
    def add_kernel(x_ptr, n):
        pid = tl.program_id(0)


    @exercise("lab02-prefill-vs-decode", "02_prefill", "flash_attention")
    def flash(q):
        return q
''')


def test_stubs_replace_bodies_of_locked_labs_only():
    stubbed, definitions = stub_source(SOURCE, {"lab01-text-to-tensors", "lab03-kernels"}, "course_lib.demo")
    assert [d.qualname for d in definitions] == ["train_bpe", "BlockAllocator", "add_kernel"]
    assert "secret sauce" not in stubbed and "merges = {}" not in stubbed, "comments of the body go too"
    assert '"""Train."""' in stubbed and '"""How many."""' in stubbed, "docstrings stay"
    assert "LIMIT = 3" in stubbed and 'return "kept"' in stubbed and "return q" in stubbed
    assert "self.num_blocks = num_blocks" not in stubbed
    assert "pid = tl.program_id(0)" not in stubbed and "pass  # the Triton kernel is an exercise" in stubbed
    namespace: dict = {"triton": type("T", (), {"jit": staticmethod(lambda f: f)}), "tl": None}
    exec(compile(stubbed.replace("import triton\n", ""), "demo", "exec"), namespace)
    with pytest.raises(NotImplementedError, match=r"Lab 0\.1 chapter 1 .*01_tokenization\.ipynb.*'train_bpe'"):
        namespace["train_bpe"]("text", 300)
    with pytest.raises(NotImplementedError, match="BlockAllocator.__init__ is your exercise"):
        namespace["BlockAllocator"](4)
    assert exercise_of(namespace["train_bpe"]) == Exercise("lab01-text-to-tensors", "01_tokenization", "train_bpe")


def test_a_body_on_the_def_line_cannot_be_stubbed():
    source = 'from course_lib.exercises import exercise\n@exercise("lab01-text-to-tensors", "01_x", "a")\ndef f(): return 1\n'
    with pytest.raises(StubError, match="on the def line"):
        stub_source(source, {"lab01-text-to-tensors"}, "m")


def test_the_marker_validates_its_arguments():
    with pytest.raises(ValueError, match="lab folder name"):
        exercise("Lab 1", "01_tokenization", "x")
    with pytest.raises(ValueError, match="chapter notebook stem"):
        exercise("lab01-text-to-tensors", "tokenization", "x")


def _answer_ids(lab: str, notebook: str) -> set[str]:
    path = ROOT / "solutions" / lab / f"{notebook}.ipynb"
    if not path.is_file():
        return set()
    return {nbgrader_meta(cell).get("grade_id") for cell in nbformat.read(path, as_version=4).cells
            if nbgrader_meta(cell).get("solution")}


def test_every_marker_names_a_real_exercise():
    """A marker that names a lab, notebook or answer cell that does not exist would stub code no one writes."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        if "exercise(" not in source:
            continue
        for definition in marked_definitions(ast.parse(source)):
            marker = definition.exercise
            where = f"{path.relative_to(ROOT)}:{definition.qualname}"
            if marker.lab not in LABS:
                problems.append(f"{where}: unknown lab {marker.lab}")
            elif (ROOT / "solutions" / marker.lab).is_dir() and marker.answer not in _answer_ids(marker.lab, marker.notebook):
                problems.append(f"{where}: no answer cell {marker.answer!r} in {marker.lab}/{marker.notebook}.ipynb")
    assert not problems, "\n".join(problems)


def test_every_lab_with_notebooks_is_known():
    for lab in (path.name for path in (ROOT / "solutions").iterdir() if path.is_dir()):
        assert lab in LABS, f"{lab} needs an entry in course_lib.exercises.LABS"


@pytest.mark.slow
def test_the_locked_edition_imports_and_its_stubs_name_their_exercise(tmp_path):
    definitions = build_edition(tmp_path, list(LABS))
    assert (tmp_path / "course_lib" / "_edition.json").is_file()
    assert not list((tmp_path / "course_lib").rglob("__pycache__"))
    probe = textwrap.dedent('''
        import importlib, pkgutil, course_lib
        from course_lib.exercises import locked_labs
        names = [m.name for m in pkgutil.walk_packages(course_lib.__path__, "course_lib.")]
        failed = []
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as error:
                failed.append(f"{name}: {type(error).__name__}: {error}")
        print("FILE", course_lib.__file__)
        print("LOCKED", sorted(locked_labs()))
        print("FAILED", failed)
    ''')
    completed = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, timeout=600,
                               cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin",
                                                  "TRITON_INTERPRET": "1"})
    assert completed.returncode == 0, completed.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in completed.stdout.splitlines() if " " in line)
    assert lines["FILE"].startswith(str(tmp_path))
    assert lines["LOCKED"] == str(sorted(LABS))
    assert lines["FAILED"] == "[]", lines["FAILED"]
    for definition in definitions:
        assert definition.exercise.lab in LABS
