"""The student kit end to end: built in a temporary folder, its notebooks run as a student runs them.

For each lab, a kit holding that lab (its earlier labs unlocked, as after their deadlines) is
built with ``course kit``. Then every notebook runs top to bottom in a kernel on the kit's
student edition, test cells included, twice:

- as handed out (blank): every visible test fails the way a student expects (the stub's
  NotImplementedError or a check's message), never with an ImportError, a missing recording or
  a crash of the platform;
- with the reference answers typed in: every visible test passes against the recorded results.

The test suite runs each lab's first chapter this way (the kit is built whole, so its imports,
stubs and recordings are all exercised); the other chapters are marked ``full`` and run with
``make test-full`` (see the Makefile): every chapter of every lab, twice, is more than the CI budget.
The grading side of the same kit (the isolated grader) is covered by test_course_pipeline.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from course_lib.exercises import LABS
from course_lib.grading.demo import DemoStudent, build_submission
from course_lib.grading.kit import build_kit
from course_lib.grading.layout import gpu_available, list_labs
from course_lib.grading.notebooks import nbgrader_meta
from course_lib.grading.sandbox import NONE, Isolation
from course_lib.grading.student import StudentKernel

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
LAB_NAMES = list_labs(ROOT / "solutions")
# What a blank notebook's visible test may fail with: the stub, a check's verdict, or the
# replay saying the stub's answer left the recorded path. Never an import or platform error.
EXPECTED_FAILURES = {"NotImplementedError", "CheckFailed", "AssertionError", "OffTheRecord"}
PLATFORM_FAILURES = {"ImportError", "ModuleNotFoundError", "FileNotFoundError", "KeyError", "AttributeError",
                     "KernelDied", "CellTimeoutError"}


def _kit(lab: str, folder: Path) -> Path:
    info = LABS.get(lab)
    kit = build_kit(ROOT, folder / "kit", labs=[lab], unlock=list(info.builds_on) if info else [])
    return kit.folder


def _checks_something(source: str) -> bool:
    """Whether a release test cell has visible checks (a hidden-only cell is imports and a comment)."""
    return any(line.strip() and not line.lstrip().startswith(("#", "import ", "from ")) for line in source.splitlines())


def _run(kit: Path, notebook, workdir: Path, siblings: dict | None = None) -> list[tuple[str, list[dict]]]:
    """(grade_id, outputs) of every test cell with visible checks, running the notebook cell by cell like JupyterLab.

    ``siblings`` (notebook stem -> notebook) are saved next to it, as the lab's other chapters sit next to
    it in the kit: a later chapter imports an earlier chapter's answers from its saved file
    (``course_lib.chapters.answers_from``).
    """
    workdir.mkdir(parents=True)
    for stem, sibling in (siblings or {}).items():
        nbformat.write(sibling, workdir / f"{stem}.ipynb")
    results = []
    with StudentKernel(edition=kit, workdir=workdir, isolation=Isolation(NONE, "student's laptop")) as kernel:
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            outputs = kernel.run_cell(cell.source, 300)["outputs"]
            # A GPU-only test cell says "skipped: needs a GPU" on a CPU and is left out of max_score.
            gpu_only = cell.metadata.get("course", {}).get("needs_gpu") and not gpu_available()
            if nbgrader_meta(cell).get("grade") and _checks_something(cell.source) and not gpu_only:
                results.append((nbgrader_meta(cell)["grade_id"], outputs))
    return results


def _errors(outputs: list[dict]) -> list[tuple[str, str]]:
    return [(o.get("ename", ""), str(o.get("evalue", ""))) for o in outputs if o.get("output_type") == "error"]


@pytest.fixture(scope="module", params=[pytest.param(lab, marks=[] if index == 0 else [pytest.mark.full])
                                        for index, lab in enumerate(LAB_NAMES)])
def lab_kit(request, tmp_path_factory):
    lab = request.param
    folder = tmp_path_factory.mktemp(lab)
    return lab, _kit(lab, folder), folder


def _chapters() -> list:
    """(lab, chapter) pairs: the first lab's first chapter in the suite, the others in the full tier."""
    params = []
    for lab_index, lab in enumerate(LAB_NAMES):
        for index, path in enumerate(sorted((ROOT / "labs" / lab).glob("*.ipynb"))):
            marks = [] if lab_index == 0 and index == 0 else [pytest.mark.full]
            params.append(pytest.param((lab, path.stem), marks=marks, id=f"{lab}/{path.stem}"))
    return params


_KITS: dict[str, tuple[Path, Path]] = {}


@pytest.fixture()
def chapter_kit(request, tmp_path_factory):
    """(lab, chapter, kit folder, scratch folder): one kit per lab per test process."""
    lab, chapter = request.param
    if lab not in _KITS:
        folder = tmp_path_factory.mktemp(lab)
        _KITS[lab] = (_kit(lab, folder), folder)
    kit, folder = _KITS[lab]
    return lab, chapter, kit, folder


def test_the_kit_holds_the_release_and_nothing_of_the_instructors(lab_kit):
    lab, kit, _ = lab_kit
    assert sorted(p.name for p in (kit / "labs" / lab).glob("*.ipynb")) == \
        sorted(p.name for p in (ROOT / "labs" / lab).glob("*.ipynb"))
    for forbidden in ("solutions", "autograde", "tests", ".git"):
        assert not (kit / forbidden).exists(), forbidden
    # A marker in use starts its line (the grading code only mentions the markers in prose).
    for path in (p for p in kit.rglob("*") if p.is_file() and p.suffix in (".py", ".ipynb", ".md", ".json")):
        text = path.read_text(errors="ignore")
        if path.suffix == ".ipynb":
            text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
        for line in text.splitlines():
            assert not line.strip().startswith(("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")), f"{path}: {line}"
    manifest = json.loads((kit / "KIT.json").read_text())
    assert lab in manifest["locked"] and manifest["labs"] == [lab]
    assert (kit / "course_lib" / "_edition.json").is_file()


@pytest.mark.parametrize("chapter_kit", _chapters(), indirect=True)
def test_a_blank_chapter_fails_its_visible_tests_the_way_a_student_expects(chapter_kit):
    lab, chapter, kit, folder = chapter_kit
    notebook = nbformat.read(kit / "labs" / lab / f"{chapter}.ipynb", as_version=4)
    siblings = {path.stem: nbformat.read(path, as_version=4) for path in sorted((kit / "labs" / lab).glob("*.ipynb"))
                if path.stem != chapter}
    problems = []
    for grade_id, outputs in _run(kit, notebook, folder / "blank" / chapter, siblings):
        errors = _errors(outputs)
        if not errors:
            problems.append(f"{chapter}/{grade_id}: passed on a blank notebook")
            continue
        ename, evalue = errors[-1]
        if ename in PLATFORM_FAILURES or ename not in EXPECTED_FAILURES:
            problems.append(f"{chapter}/{grade_id}: {ename}: {evalue[:200]}")
        if ename == "OffTheRecord" and "no recorded reference result" in evalue:
            problems.append(f"{chapter}/{grade_id}: a visible check has no recording: {evalue[:200]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chapter_kit", _chapters(), indirect=True)
def test_reference_answers_pass_every_visible_test_of_a_chapter_in_the_kit(chapter_kit):
    lab, chapter, kit, folder = chapter_kit
    correct = DemoStudent("correct", "the reference answers", "solution")

    def solved(stem: str):
        return build_submission(nbformat.read(kit / "labs" / lab / f"{stem}.ipynb", as_version=4),
                                nbformat.read(ROOT / "solutions" / lab / f"{stem}.ipynb", as_version=4), correct, stem)

    notebook = solved(chapter)
    siblings = {path.stem: solved(path.stem) for path in sorted((kit / "labs" / lab).glob("*.ipynb"))
                if path.stem != chapter}
    problems = []
    for grade_id, outputs in _run(kit, notebook, folder / "solved" / chapter, siblings):
        for ename, evalue in _errors(outputs):
            message = re.sub(r"\s+", " ", evalue)[:300]
            problems.append(f"{chapter}/{grade_id}: {ename}: {message}")
    assert not problems, "\n".join(problems)
