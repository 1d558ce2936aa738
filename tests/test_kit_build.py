"""Building the student kit: the leak rule on a small course, a refused build, the default labs, the help.

The leak rule (``autograde.kit``, CONTRIBUTING "What a kit may contain"): code a release
notebook gives is the course's gift; code that answers a locked exercise never ships. A tiny
course is written to a temporary folder (one library module with a marked reference, a lab of two
chapters, its release made with nbgrader's own preprocessors) and ``find_leaks`` runs on kits made
from it: each case is a way an answer could reach students, or a gift that must not be refused.
The real labs' kits are built by tests/test_term.py.
"""

from __future__ import annotations

import re
import shlex
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograde import authoring as a
from autograde.kit import build_kit, find_leaks, kit_plan
from autograde.layout import GradingError

ROOT = Path(__file__).resolve().parent.parent
LAB = "lab01-text-to-tensors"   # a lab name the library knows; the course around it is made up

REFERENCE = '''
from course_lib.exercises import exercise


@exercise("lab01-text-to-tensors", "01_first", "shortest_time")
def shortest_time(function, repeats):
    """The fastest of ``repeats`` calls of ``function``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def platform_helper(values):
    """Platform code, not an answer."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]
'''

# The answer of chapter 1's second exercise: a function with no marked reference in the library.
WINDOWED_SUM = '''
    if width < 1 or width > len(values):
        raise ValueError(f"width must be in [1, {len(values)}], got {width}")
    widest = float("-inf")
    for index in range(len(values) - width + 1):
        window_total = sum(values[index:index + width])
        widest = max(widest, window_total)
    return widest
'''

GIVEN_HELPER = '''
def load_measurements(path):
    with open(path, encoding="utf-8") as handle:
        rows = [line.strip().split(",") for line in handle]
    header, body = rows[0], rows[1:]
    return {name: [float(row[i]) for row in body] for i, name in enumerate(header)}
'''


def _answer(grade_id: str, signature: str, body: str):
    body = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return a.answer(grade_id, f"{signature}\n    ### BEGIN SOLUTION\n{body}\n    ### END SOLUTION")


def _chapter1(example: str = "print('timing')"):
    return a.notebook([
        a.markdown("# Chapter 1"),
        a.code(GIVEN_HELPER),
        a.code(example),
        _answer("shortest_time", "def shortest_time(function, repeats):", '''
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                function()
                best = min(best, time.perf_counter() - start)
            return best
        '''),
        a.tests("test_shortest_time", 1, "assert shortest_time(lambda: None, 2) >= 0"),
        _answer("widest_window", "def widest_window(values, width):", WINDOWED_SUM),
        a.tests("test_widest_window", 1, "assert widest_window([1, 2, 3], 2) == 5"),
    ])


def _chapter2(given: str = "print('chapter 2')", answer_body: str = "return 0"):
    return a.notebook([
        a.markdown("# Chapter 2"),
        a.code(given),
        _answer("summary", "def summary(path):", answer_body),
        a.tests("test_summary", 1, "assert summary is not None"),
    ])


def _release(source):
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, ComputeChecksums, LockCells

    notebook, resources = nbformat.reads(nbformat.writes(source), as_version=4), {}
    for preprocessor in (LockCells, ClearSolutions, ClearHiddenTests, ComputeChecksums):
        notebook, resources = preprocessor().preprocess(notebook, resources)
    return notebook


def _course(root: Path, chapters: dict[str, object], *, platform: str = REFERENCE) -> dict:
    """Write solutions/, labs/ and course_lib/ of a tiny course; returns find_leaks' arguments."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "course_lib").mkdir(parents=True)
    (root / "course_lib" / "measure.py").write_text(platform)
    for folder in ("solutions", "labs"):
        (root / folder / LAB).mkdir(parents=True)
    for name, source in chapters.items():
        nbformat.write(source, root / "solutions" / LAB / f"{name}.ipynb")
        nbformat.write(_release(source), root / "labs" / LAB / f"{name}.ipynb")
    return {"package_dir": root / "course_lib", "solutions_dir": root / "solutions", "locked": [LAB]}


def _kit_of(root: Path, *, platform: str | None = None) -> Path:
    """A kit folder: the release notebooks, and (to test the library side) a platform module."""
    kit = root / "kit"
    shutil.rmtree(kit, ignore_errors=True)
    shutil.copytree(root / "labs", kit / "labs")
    if platform is not None:
        (kit / "course_lib").mkdir()
        (kit / "course_lib" / "platform.py").write_text(platform)
    return kit


def _leaks(tmp_path, chapters, *, platform_in_kit=None):
    arguments = _course(tmp_path / "course", chapters)
    return find_leaks(_kit_of(tmp_path / "course", platform=platform_in_kit), **arguments)


def test_a_course_of_gifts_builds(tmp_path):
    assert _leaks(tmp_path, {"01_first": _chapter1(), "02_second": _chapter2()}) == []


def test_a_later_answer_that_repeats_given_code_is_no_leak(tmp_path):
    # Chapter 2's answer reuses chapter 1's given helper (as a student would paste it): the course gave it.
    reuse = GIVEN_HELPER.replace("def load_measurements(path):\n", "") + "\nreturn {k: sum(v) for k, v in data.items()}"
    assert _leaks(tmp_path, {"01_first": _chapter1(), "02_second": _chapter2(answer_body=reuse)}) == []


def test_a_worked_example_that_is_a_reference_with_the_names_changed_is_a_leak(tmp_path):
    example = '''
        def best_of(run, times):
            quickest = float("inf")
            for _ in range(times):
                began = time.perf_counter()
                run()
                quickest = min(quickest, time.perf_counter() - began)
            return quickest
    '''
    leaks = _leaks(tmp_path, {"01_first": _chapter1(textwrap.dedent(example)), "02_second": _chapter2()})
    assert leaks, "a worked example that is shortest_time renamed must be refused"
    assert all("01_first.ipynb" in leak.kit_file for leak in leaks)
    assert any("the reference course_lib/measure.py:shortest_time" in str(leak) for leak in leaks)
    assert any("cell `def best_of(run, times):`" in str(leak) for leak in leaks), [str(leak) for leak in leaks]


def test_a_later_chapter_that_shows_an_earlier_answer_is_a_leak(tmp_path):
    # No library reference answers widest_window: the solution cell is the only record of the answer.
    shown = "def best_window(values, width):\n" + textwrap.indent(textwrap.dedent(WINDOWED_SUM).strip(), "    ")
    leaks = _leaks(tmp_path, {"01_first": _chapter1(), "02_second": _chapter2(given=shown)})
    assert leaks and all("02_second.ipynb" in leak.kit_file for leak in leaks)
    assert "the solution cell 'widest_window' of lab01-text-to-tensors/01_first.ipynb" in str(leaks[0])


def test_given_code_before_an_answer_that_holds_the_whole_answer_is_a_leak(tmp_path):
    whole = "def example_window(xs, w):\n" + textwrap.indent(textwrap.dedent(WINDOWED_SUM).strip(), "    ")
    leaks = _leaks(tmp_path, {"01_first": _chapter1(whole), "02_second": _chapter2()})
    assert leaks and "widest_window" in str(leaks[0])


def test_platform_code_with_a_copy_of_a_reference_is_a_leak_and_unlocked_labs_are_not_scanned(tmp_path):
    copy = '''
def diagnose(values, count):
    smallest = float("inf")
    for _ in range(count):
        t0 = time.perf_counter()
        values()
        smallest = min(smallest, time.perf_counter() - t0)
    return smallest
'''
    arguments = _course(tmp_path / "course", {"01_first": _chapter1(), "02_second": _chapter2()})
    kit = _kit_of(tmp_path / "course", platform=copy)
    leaks = find_leaks(kit, **arguments)
    assert [leak.kit_file for leak in leaks] == ["course_lib/platform.py"]
    assert leaks[0].where == "line 3"
    assert find_leaks(kit, **{**arguments, "locked": []}) == []


# --------------------------------------------------------------------------------------------
# The real course: which labs go in, a refused build, the command's own examples
# --------------------------------------------------------------------------------------------


def test_without_labs_the_kit_holds_every_lab_that_can_run_with_what_is_unlocked():
    start = kit_plan(ROOT, None, [])
    assert start.labs == [LAB] and set(start.left_out) == {"lab02-prefill-vs-decode", "lab03-kernels",
                                                         "lab04-faster-decoding", "lab05-serving"}
    after_lab1 = kit_plan(ROOT, None, [LAB])
    assert after_lab1.labs == [LAB, "lab02-prefill-vs-decode"]
    everything = kit_plan(ROOT, None, [LAB, "lab02-prefill-vs-decode"])
    assert everything.labs == sorted(p.name for p in (ROOT / "solutions").iterdir() if p.name.startswith("lab"))
    assert everything.left_out == {}
    with pytest.raises(GradingError, match="--unlock lab01-text-to-tensors lab02-prefill-vs-decode"):
        kit_plan(ROOT, ["lab03-kernels"], [LAB])


def test_a_refused_build_writes_nothing_and_keeps_an_old_kit(tmp_path, monkeypatch):
    from autograde import kit as kit_module

    monkeypatch.setattr(kit_module, "find_leaks", lambda *args, **kwargs: [kit_module.Leak("x.py", "line 1", "y")])
    out = tmp_path / "new" / "deeper" / "kit"
    with pytest.raises(GradingError, match="refused: the kit would contain answers"):
        build_kit(ROOT, out, labs=[LAB])
    assert not (tmp_path / "new").exists(), "the folders made on the way are removed too"
    old = tmp_path / "old-kit"
    old.mkdir()
    (old / "student-notes.txt").write_text("mine")
    with pytest.raises(GradingError):
        build_kit(ROOT, old, labs=[LAB], force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old-kit"], "no scratch folder left beside it"
    assert (old / "student-notes.txt").read_text() == "mine", "a refused --force build keeps the old folder"


def test_a_good_build_replaces_an_old_kit_only_with_force(tmp_path):
    out = tmp_path / "kit"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(GradingError, match="pass --force"):
        build_kit(ROOT, out, labs=[LAB])
    kit = build_kit(ROOT, out, labs=[LAB], force=True, archive=True)
    assert not (out / "old.txt").exists() and (out / "labs" / LAB).is_dir() and kit.archive.is_file()
    assert oct(out.stat().st_mode & 0o777) != oct(0o700), "an ordinary folder, not mkdtemp's private one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit", "kit.zip"]


def _help_examples() -> list[str]:
    from autograde.commands.kit import DESCRIPTION

    examples = DESCRIPTION.split("examples:", 1)[1]
    return [line.split("#", 1)[0].strip() for line in examples.splitlines() if line.strip().startswith("course kit")]


@pytest.mark.slow
@pytest.mark.parametrize("example", _help_examples())
def test_every_example_of_course_kit_help_builds_a_kit(example, tmp_path, capsys):
    from autograde.cli import main

    argv = shlex.split(example)[1:]
    out = tmp_path / "kit"
    argv[argv.index("--out") + 1] = str(out)
    code = main(argv)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert (out / "KIT.json").is_file() and "Student kit written to" in printed.out
    if "--zip" in argv:
        assert (tmp_path / "kit.zip").is_file()
    if "--labs" not in argv:   # the default: every lab that can run, the rest named with what they need
        assert re.search(r"left out: |labs: +lab01", printed.out)
