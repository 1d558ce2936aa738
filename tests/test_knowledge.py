"""The written questions of every lab (autograde/knowledge/<lab>.toml): the file format's rules, the
questions' places in the solution notebooks, the cells they become, and the one numeric question
kept autograded, whose spec's expected values are computed again from its reference here."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograde.authoring import written_question
from autograde.knowledge import (LabQuestions, Placement, RubricError, labs_with_questions, load_lab,
                                 load_questions_file)
from autograde.knowledge.questions import MAX_CRITERIA, question_cells
from course_lib.exercises import LABS

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"


def _solution_cells(lab: str, notebook: str) -> list[dict]:
    return json.loads((SOLUTIONS / lab / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]


# ------------------------------------------------------------------------------------- the content

def test_every_lab_has_written_questions_with_rubrics():
    assert labs_with_questions() == sorted(LABS)
    for lab in LABS:
        questions = load_lab(lab)
        count = len(questions.questions)
        # the issue: Labs 0.1 and 0.2 get the source's questions, Labs 0.3 to 0.5 four to six each
        assert 4 <= count <= 6, f"{lab}: {count} written questions"
        for question in questions.questions:
            assert question.prompt and question.model_answer, question.key
            assert len(question.model_answer) > 300, f"{question.key}: the model answer is a sketch"
            assert all(len(criterion.text) > 20 for criterion in question.criteria), question.key


@pytest.mark.parametrize("lab", sorted(LABS))
def test_every_question_has_one_place_in_an_existing_solution_notebook(lab):
    questions = load_lab(lab)
    for item in (*questions.questions, *questions.autograded):
        cells = _solution_cells(lab, item.notebook)
        assert item.place is not None, f"{item.grade_id}: no place"
        index = item.place.index_in(cells)
        assert 0 < index <= len(cells)
        taken = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") for cell in cells}
        assert item.grade_id not in taken and f"{item.grade_id}_prompt" not in taken, \
            f"{item.grade_id} is already a cell of {lab}/{item.notebook}"


def test_a_written_question_becomes_a_locked_prompt_and_a_manually_graded_answer_cell():
    question = load_lab("lab02-prefill-vs-decode").question("03_decode/written_decode_memory_bound")
    prompt, answer = question_cells(question)
    assert prompt.cell_type == "markdown" and prompt.metadata["nbgrader"]["locked"]
    assert prompt.source.startswith("**Written question (5 points, graded by your TA).**")
    meta = answer.metadata["nbgrader"]
    assert answer.cell_type == "markdown"
    assert (meta["grade"], meta["solution"], meta["locked"], meta["points"]) == (True, True, False, 5)
    assert meta["grade_id"] == "written_decode_memory_bound"
    assert answer.source == question.model_answer
    nbformat.validate(nbformat.v4.new_notebook(cells=[prompt, answer]))


def test_written_question_refuses_no_points_and_an_empty_model_answer():
    with pytest.raises(ValueError, match="points"):
        written_question("written_x", 0, "Why?", "Because.")
    with pytest.raises(ValueError, match="model answer"):
        written_question("written_x", 2, "Why?", "   ")


@pytest.mark.slow
def test_nbgrader_releases_a_written_question_without_its_model_answer(tmp_path):
    """The release path phase 2 relies on: nbgrader replaces the written solution by its stub and
    keeps the cell's points, and the leak scan then finds no model answer in the release."""
    from autograde.knowledge.leaks import find_answer_leaks
    from autograde.layout import Workspace
    from autograde.release import generate_release

    question = load_lab("lab01-text-to-tensors").question("04_paging/written_paging_like_an_os")
    lab = "lab01-text-to-tensors"
    (tmp_path / "solutions" / lab).mkdir(parents=True)
    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Paging"), *question_cells(question)])
    source.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(source, tmp_path / "solutions" / lab / "04_paging.ipynb")
    release = generate_release(tmp_path / "solutions", lab, Workspace.create(tmp_path / "workspace"))
    released = nbformat.read(release / "04_paging.ipynb", as_version=4)
    answer = next(cell for cell in released.cells
                  if cell.metadata.get("nbgrader", {}).get("grade_id") == question.grade_id)
    assert answer.source == "YOUR ANSWER HERE"
    assert answer.metadata["nbgrader"]["points"] == question.points
    assert answer.metadata["nbgrader"]["checksum"]     # so an untouched answer grades as blank (0)
    assert find_answer_leaks(release, [load_lab(lab)]) == []
    assert sorted(path.name for path in release.iterdir()) == ["04_paging.ipynb"]


# ------------------------------------------------------------------------------------- the numeric one

def _reference(spec):
    namespace: dict = {}
    exec(f"{spec.signature}\n{textwrap.indent(spec.reference, '    ')}", namespace)   # noqa: S102 - our own spec
    return namespace[spec.signature.split("(")[0].removeprefix("def ").strip()]


def _outcome(function, case):
    try:
        return function(*case["args"])
    except Exception as error:   # noqa: BLE001 - the spec names the exception a case expects
        return type(error).__name__


def test_the_numeric_knowledge_check_stays_autograded_and_its_expected_values_are_right():
    """The KV cache of a 32-layer, 5,120-wide model in fp16: 640 KiB a token, 2.5 GiB for 4,096."""
    lab = load_lab("lab02-prefill-vs-decode")
    (spec,) = lab.autograded
    assert spec.grade_id == "kv_cache_bytes_mha" and spec.notebook == "03_decode"
    reference = _reference(spec)
    for case in (*spec.visible, *spec.hidden):
        assert _outcome(reference, case) == case["expected"], case["why"]
    assert reference(32, 5120, 1, 2) == 640 * 1024 and reference(32, 5120, 4096, 2) == 2.5 * 2**30
    buggy = _reference(type(spec)(**{**spec.__dict__, "reference": spec.demo_bug["answer"]}))
    assert all(_outcome(buggy, case) != case["expected"] for case in spec.visible)
    assert any(_outcome(buggy, case) != case["expected"] for case in spec.hidden)


# ------------------------------------------------------------------------------------- the format

GOOD = '''
lab = "lab42-test"

[[question]]
grade_id = "written_one"
notebook = "01_first"
points = 3
place = { before = "## 2. Next" }
prompt = "Why?"
model_answer = "Because."

[[question.criteria]]
id = "a"
points = 2
text = "Says why."
partial = [ { points = 1, when = "half of why" } ]

[[question.criteria]]
id = "b"
points = 1
text = "Says how."
'''


def _load(tmp_path, text: str, name: str = "lab42-test") -> LabQuestions:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return load_questions_file(path)


def test_a_good_file_reads_with_its_levels_and_a_stable_rubric_hash(tmp_path):
    questions = _load(tmp_path, GOOD)
    (question,) = questions.questions
    assert question.key == "01_first/written_one" and questions.points == 3
    assert question.criterion("a").levels() == (2.0, 1.0, 0.0)
    assert question.criterion("b").levels() == (1.0, 0.0)
    assert question.rubric_hash == _load(tmp_path, GOOD.replace("Says why.", "Says why, reworded.")).questions[0].rubric_hash
    assert question.rubric_hash != _load(tmp_path, GOOD.replace("points = 1, when", "points = 0.5, when")).questions[0].rubric_hash


@pytest.mark.parametrize("change, message", [
    (("points = 3", "points = 4"), "add up to 3 points, the question is worth 4"),
    (('grade_id = "written_one"', 'grade_id = "one"'), "written_<name>"),
    (("points = 1, when", "points = 2, when"), "must be less than the criterion's 2"),
    (('id = "b"', 'id = "a"'), "criterion ids repeat: a"),
    (('prompt = "Why?"', 'prompt = "Why?"\nanswer = "x"'), "unknown field(s) answer"),
    (('notebook = "01_first"', 'notebook = "first"'), "chapter's stem"),
    (('place = { before = "## 2. Next" }', 'place = { inside = "x" }'), "place must be"),
    (("points = 3", "points = -3"), "above 0"),
    (('lab = "lab42-test"', 'lab = "lab43-other"'), "named for 'lab42-test'"),
    (("[[question.criteria]]\nid = \"b\"", "[[question.criteria]]\nid = \"B c\""), "short lower-case name"),
])
def test_a_broken_file_is_refused_naming_what_is_wrong(tmp_path, change, message):
    with pytest.raises(RubricError) as error:
        _load(tmp_path, GOOD.replace(*change))
    assert message in str(error.value)
    assert "lab42-test.toml" in str(error.value)


def test_more_criteria_than_number_keys_are_refused(tmp_path):
    criteria = "".join(f'\n[[question.criteria]]\nid = "c{i}"\npoints = 1\ntext = "x"\n' for i in range(MAX_CRITERIA + 1))
    text = GOOD.split("[[question.criteria]]")[0].replace("points = 3", f"points = {MAX_CRITERIA + 1}") + criteria
    with pytest.raises(RubricError, match="give 1 to 9"):
        _load(tmp_path, text)


def test_a_place_must_match_exactly_one_cell():
    cells = [{"cell_type": "markdown", "source": "## 1. First", "metadata": {}},
             {"cell_type": "code", "source": "x = 1", "metadata": {"nbgrader": {"grade_id": "answer_x"}}},
             {"cell_type": "markdown", "source": ["## 2. Next\n", "text"], "metadata": {}},
             {"cell_type": "markdown", "source": "## 2. Next again", "metadata": {}}]
    assert Placement(after="answer_x").index_in(cells) == 2
    assert Placement(before="## 1. First").index_in(cells) == 0
    with pytest.raises(RubricError, match="2 cells"):
        Placement(before="## 2. Next").index_in(cells)
    with pytest.raises(RubricError, match="no cell"):
        Placement(after="## 9. Nowhere").index_in(cells)


def test_a_lab_without_a_file_has_no_written_questions(tmp_path):
    assert load_lab("lab77-none", tmp_path).questions == ()
