"""Lab 0.4 in its student kit: a wrong answer gets the check's own message from a visible test.

In the kit the visible tests replay what the course's answers recorded (``checks.fixtures``). A
check that asks the reference something only when an answer is wrong (to say *why* it is wrong)
would find nothing recorded there and fail with a bare ``OffTheRecord``. So here every demo student
of the lab (each carries a realistic bug) runs the visible test cells of its chapter in a real kit,
in a kernel on the kit's student edition, as a student would before handing in:

- no visible test ever ends in ``OffTheRecord``: the recording covers what a diagnosis needs;
- the wrong answers the chapters warn about fail a visible test, with a message naming the mistake;
- the reference answers pass.

Only the answer cells and the visible test cells run (the experiments are not needed to judge an
answer), in one kernel per chapter.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import nbformat
import pytest

from autograde.demos import solution_answer
from autograde.kit import build_kit
from course_lib.exercises import LABS
from course_lib.handin.notebooks import nbgrader_meta
from course_lib.runner.sandbox import NONE, Isolation
from course_lib.runner.student import StudentKernel

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
LAB = "lab04-faster-decoding"
SPECS = ROOT / "autograde" / "demo" / LAB
PRELUDE = "import math\nimport torch\nfrom course_lib.speculative import sample_with_uniform"

# Wrong answers the chapters warn about (or the issues found): each must fail a visible test of its
# chapter in the kit, with a message that names the mistake.
MUST_FAIL_VISIBLY = {
    "buggy-ngram-shortest-first": "longest first",
    "buggy-ngram-no-overlap": "overlaps the ending",
    "buggy-ngram-first-occurrence": "FIRST occurrence",
    "buggy-chi-square-no-inf": "math.inf",
    "buggy-no-bonus-token": "bonus token",
    "buggy-resample-from-p": "residual",
    "buggy-bonus-from-wrong-row": "LAST row",
    "buggy-emits-rejected-draft": "A rejected draft is not emitted",
    "buggy-accept-less-or-equal": "The test is strict",
    "buggy-accept-without-min": "above 1",
    "buggy-scale-wrong-axis": "dim=1",
    "buggy-int4-sign-lost": "sign",
    "buggy-perplexity-no-shift": "row t of the logits predicts token t + 1",
    "buggy-expected-tokens-off-by-one": "one token short",
    "buggy-keeps-rejected-slots": "slots to free",
}


def _chapters() -> dict[str, nbformat.NotebookNode]:
    return {path.stem: nbformat.read(path, as_version=4) for path in sorted((ROOT / "solutions" / LAB).glob("*.ipynb"))}


def _answers(notebook) -> dict[str, str]:
    return {nbgrader_meta(c)["grade_id"]: solution_answer(c.source) for c in notebook.cells
            if nbgrader_meta(c).get("solution") and not nbgrader_meta(c).get("grade")}


def _visible_tests(chapter: str) -> list[tuple[str, str]]:
    release = nbformat.read(ROOT / "labs" / LAB / f"{chapter}.ipynb", as_version=4)
    cells = [(nbgrader_meta(c)["grade_id"], c.source) for c in release.cells if nbgrader_meta(c).get("grade")]
    return [(grade_id, source) for grade_id, source in cells
            if any(line.lstrip().startswith("checks.check_") for line in source.splitlines())]


def _errors(outputs: list[dict]) -> list[tuple[str, str]]:
    return [(o.get("ename", ""), re.sub(r"\s+", " ", str(o.get("evalue", "")))) for o in outputs
            if o.get("output_type") == "error"]


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lab04-kit")
    return build_kit(ROOT, folder / "kit", labs=[LAB], unlock=list(LABS[LAB].builds_on)).folder


@pytest.fixture(scope="module")
def feedback(kit, tmp_path_factory) -> dict[str, list[tuple[str, str, str]]]:
    """student -> [(test cell, error name, message)] of every visible test cell that failed for it."""
    chapters = _chapters()
    students = {path.stem: runpy.run_path(str(path))["ANSWERS"] for path in sorted(SPECS.glob("buggy-*.py"))}
    results: dict[str, list[tuple[str, str, str]]] = {}
    for chapter, notebook in chapters.items():
        reference = _answers(notebook)
        mine = {name: answers for name, answers in students.items() if set(answers) & set(reference)}
        workdir = tmp_path_factory.mktemp(chapter)
        with StudentKernel(edition=kit, workdir=workdir, isolation=Isolation(NONE, "student's laptop")) as kernel:
            def run(answers: dict[str, str]) -> list[tuple[str, str, str]]:
                for source in answers.values():
                    assert not _errors(kernel.run_cell(source, 120)["outputs"])
                failures = []
                for grade_id, source in _visible_tests(chapter):
                    failures += [(grade_id, *error) for error in _errors(kernel.run_cell(source, 300)["outputs"])]
                return failures

            kernel.run_cell(PRELUDE, 120)
            results[f"reference:{chapter}"] = run(reference)
            for name, answers in mine.items():
                results[name] = run({**reference, **answers})
    return results


def test_the_reference_answers_pass_every_visible_test_in_the_kit(feedback):
    failing = {name: errors for name, errors in feedback.items() if name.startswith("reference:") and errors}
    assert not failing, failing


def test_no_demo_student_gets_a_bare_off_the_record(feedback):
    off = {name: [e for e in errors if e[1] == "OffTheRecord"] for name, errors in feedback.items()}
    assert not any(off.values()), {name: errors for name, errors in off.items() if errors}


@pytest.mark.parametrize("student, needle", sorted(MUST_FAIL_VISIBLY.items()))
def test_a_warned_about_wrong_answer_fails_a_visible_test_naming_the_mistake(feedback, student, needle):
    errors = feedback[student]
    assert errors, f"{student} passes every visible test in the kit"
    assert any(name == "CheckFailed" and needle in message for _, name, message in errors), errors


@pytest.mark.full
def test_every_cell_of_the_lab_runs_in_the_kit_with_the_reference_answers(kit, tmp_path):
    """The whole lab as a student who wrote the reference answers runs it: the chapters side by side (a later
    chapter imports an earlier one's answers), every cell, worked examples and experiments included."""
    from autograde.demos import DemoStudent, build_submission

    correct = DemoStudent("correct", "the reference answers", "solution")
    folder = tmp_path / LAB
    folder.mkdir()
    notebooks = {}
    for chapter, solution in _chapters().items():
        release = nbformat.read(ROOT / "labs" / LAB / f"{chapter}.ipynb", as_version=4)
        notebooks[chapter] = build_submission(release, solution, correct, chapter)
        nbformat.write(notebooks[chapter], folder / f"{chapter}.ipynb")
    problems = []
    for chapter, notebook in notebooks.items():
        with StudentKernel(edition=kit, workdir=folder, isolation=Isolation(NONE, "student's laptop")) as kernel:
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type != "code":
                    continue
                outputs = kernel.run_cell(cell.source, 600)["outputs"]
                problems += [f"{chapter} cell {index}: {name}: {message[:300]}" for name, message in _errors(outputs)]
                problems += [f"{chapter} cell {index}: stderr: {o.get('text', '')[:300]}" for o in outputs
                             if o.get("output_type") == "stream" and o.get("name") == "stderr"
                             and "it/s]" not in o.get("text", "") and "%|" not in o.get("text", "")]
    assert not problems, "\n".join(problems)
