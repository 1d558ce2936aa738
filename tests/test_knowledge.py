"""The written questions of every lab: their rubrics (autograde/knowledge/<lab>.toml) joined to their
cells in the solution notebooks (prompt, model answer, points), the file format's rules, each
chapter's header and the README counting the TA's points, and the one numeric question of the
source kept autograded (Lab 0.2's kv_cache_bytes_mha)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograde.authoring import points_summary, written_question
from autograde.knowledge import (LabQuestions, Placement, RubricError, insert_question, labs_with_questions, load_lab,
                                 load_questions_file)
from autograde.knowledge.questions import MAX_CRITERIA
from course_lib.exercises import LABS
from course_lib.handin.notebooks import autograded_cells, is_written_answer, nbgrader_meta, written_cells

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
def test_each_answer_cell_follows_its_locked_prompt_and_is_worth_its_rubric(lab):
    """load_lab refuses a rubric without its cell, a cell without its rubric and points that differ;
    here: the prompt cell comes right before its answer cell, locked, and says the points."""
    questions = load_lab(lab)
    for question in questions.questions:
        cells = _solution_cells(lab, question.notebook)
        index = next(i for i, cell in enumerate(cells) if nbgrader_meta(cell).get("grade_id") == question.grade_id)
        prompt = cells[index - 1]
        assert nbgrader_meta(prompt).get("grade_id") == f"{question.grade_id}_prompt"
        assert nbgrader_meta(prompt).get("locked") and prompt["cell_type"] == "markdown"
        assert "".join(prompt["source"]).startswith(f"**Written question ({question.points:g} points, graded by your TA).**")
        assert cells[index]["cell_type"] == "markdown" and is_written_answer(cells[index])


def test_a_written_question_becomes_a_locked_prompt_and_a_manually_graded_answer_cell():
    question = load_lab("lab02-prefill-vs-decode").question("03_decode/written_decode_memory_bound")
    prompt, answer = written_question(question.grade_id, question.points, question.prompt, question.model_answer)
    assert prompt.cell_type == "markdown" and prompt.metadata["nbgrader"]["locked"]
    assert prompt.source.startswith("**Written question (5 points, graded by your TA).**")
    meta = answer.metadata["nbgrader"]
    assert answer.cell_type == "markdown"
    assert (meta["grade"], meta["solution"], meta["locked"], meta["points"]) == (True, True, False, 5)
    assert meta["grade_id"] == "written_decode_memory_bound"
    assert answer.source == question.model_answer
    nbformat.validate(nbformat.v4.new_notebook(cells=[prompt, answer]))


def test_rubric_and_notebook_must_agree(tmp_path):
    """A rubric naming no cell, a cell without a rubric, and points that differ are each refused by name."""
    lab_dir = tmp_path / "solutions" / "lab42-test"
    lab_dir.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# One"), nbformat.v4.new_markdown_cell("## 2. Next")])
    insert_question(nb, "written_one", 3, "Why?", "Because.", Placement(before="## 2. Next"))
    nbformat.write(nb, lab_dir / "01_first.ipynb")
    (tmp_path / "lab42-test.toml").write_text(GOOD, encoding="utf-8")
    (question,) = load_lab("lab42-test", tmp_path, tmp_path / "solutions").questions
    assert (question.prompt, question.model_answer, question.points) == ("Why?", "Because.", 3)
    (tmp_path / "lab42-test.toml").write_text(GOOD.replace('points = 1\ntext = "Says how."', 'points = 2\ntext = "Says how."'),
                                              encoding="utf-8")
    with pytest.raises(RubricError, match="add up to 4 points, the answer cell in 01_first.ipynb is worth 3"):
        load_lab("lab42-test", tmp_path, tmp_path / "solutions")
    (tmp_path / "lab42-test.toml").write_text(GOOD.replace("written_one", "written_two"), encoding="utf-8")
    with pytest.raises(RubricError, match="no written answer cell 'written_two'"):
        load_lab("lab42-test", tmp_path, tmp_path / "solutions")
    (tmp_path / "lab42-test.toml").write_text('lab = "lab42-test"\n', encoding="utf-8")
    with pytest.raises(RubricError, match="no rubric for the written answer cell"):
        load_lab("lab42-test", tmp_path, tmp_path / "solutions")
    with pytest.raises(RubricError, match="already a cell"):
        insert_question(nb, "written_one", 3, "Why?", "Because.", Placement(before="## 2. Next"))


def test_written_question_refuses_no_points_and_an_empty_model_answer():
    with pytest.raises(ValueError, match="points"):
        written_question("written_x", 0, "Why?", "Because.")
    with pytest.raises(ValueError, match="model answer"):
        written_question("written_x", 2, "Why?", "   ")


@pytest.mark.slow
def test_nbgrader_releases_a_written_question_without_its_model_answer(tmp_path):
    """nbgrader replaces the written solution by its stub and keeps the cell's points, and the leak scan
    then finds no model answer in the release."""
    from autograde.knowledge.leaks import find_answer_leaks
    from autograde.layout import Workspace
    from autograde.release import generate_release

    question = load_lab("lab01-text-to-tensors").question("04_paging/written_paging_like_an_os")
    lab = "lab01-text-to-tensors"
    (tmp_path / "solutions" / lab).mkdir(parents=True)
    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Paging"),
                                             *written_question(question.grade_id, question.points, question.prompt,
                                                               question.model_answer)])
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


def test_the_release_holds_no_model_answer_and_every_written_cell_as_a_stub():
    """What the chapters give (their cells but the written answers, taken from solutions/) is no leak:
    a model answer may repeat a "check yourself" answer of its chapter."""
    from autograde.knowledge.leaks import find_answer_leaks, given_text

    labs = [load_lab(lab) for lab in labs_with_questions()]
    assert find_answer_leaks(ROOT / "labs", labs, given=given_text(SOLUTIONS)) == []
    for lab in labs:
        for question in lab.questions:
            cells = json.loads((ROOT / "labs" / lab.lab / f"{question.notebook}.ipynb").read_text())["cells"]
            (answer,) = [cell for cell in cells if nbgrader_meta(cell).get("grade_id") == question.grade_id]
            assert "".join(answer["source"]) == "YOUR ANSWER HERE", question.key


# ------------------------------------------------------------------------------------- the points

@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("lab*/*.ipynb")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_chapter_header_announces_its_points_with_the_tas_share(path):
    notebook = nbformat.read(path, as_version=4)
    assert points_summary(notebook) in notebook.cells[0].source, f"{path.name}: {points_summary(notebook)!r}"


def test_the_readme_chapter_table_counts_the_tas_points():
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (?:0\.(\d) [^|]*)?\| (\d) [^|]*\| \d+ min \| ([^|]*) \|$", readme, re.MULTILINE)
    lab_number, found = 0, {}
    for lab_digit, chapter, points in rows:
        lab_number = int(lab_digit) if lab_digit else lab_number
        found[(lab_number, int(chapter))] = points
    for number, lab in enumerate(sorted(LABS), 1):
        for path in sorted((SOLUTIONS / lab).glob("*.ipynb")):
            notebook = nbformat.read(path, as_version=4)
            tests = autograded_cells(notebook)
            gpu = sum(nbgrader_meta(c)["points"] for c in tests if c.metadata.get("course", {}).get("needs_gpu"))
            auto = sum(nbgrader_meta(c)["points"] for c in tests) - gpu
            ta = sum(nbgrader_meta(c)["points"] for c in written_cells(notebook))
            expected = f"{auto:g}" + (f" + {gpu:g} on a GPU" if gpu else "") + (f" + {ta:g} by your TA" if ta else "")
            assert found.get((number, int(path.stem[:2]))) == expected, f"README: {lab} {path.stem}"


# ------------------------------------------------------------------------------------- the numeric one

def test_the_numeric_knowledge_check_is_an_autograded_exercise_with_a_helpful_hint():
    """The KV cache of a 32-layer, 5,120-wide model in fp16: 640 KiB a token, 2.5 GiB for 4,096, as the
    reference says and the check demands; the demo bug (the keys only) is told to count the values."""
    from course_lib.checks import CheckFailed
    from course_lib.checks import decode as checks
    from course_lib.kv_cache import kv_cache_bytes_mha

    assert kv_cache_bytes_mha(32, 5120, 1, 2) == 640 * 1024
    assert kv_cache_bytes_mha(32, 5120, 4096, 2) == 2.5 * 2**30
    assert kv_cache_bytes_mha(24, 2048, 1000, 0.5) == 49_152_000 and kv_cache_bytes_mha(32, 4096, 0, 2) == 0
    with pytest.raises(ValueError, match="num_tokens"):
        kv_cache_bytes_mha(32, 4096, -1, 2)

    def student(num_layers, hidden_size, num_tokens, bytes_per_element):
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        return 2 * num_layers * hidden_size * num_tokens * bytes_per_element

    def keys_only(num_layers, hidden_size, num_tokens, bytes_per_element):
        return num_layers * hidden_size * num_tokens * bytes_per_element

    def in_bits(num_layers, hidden_size, num_tokens, bytes_per_element):
        return 16 * num_layers * hidden_size * num_tokens * bytes_per_element

    checks.check_kv_cache_bytes_mha(student, 32, 5120, 4096, 2)
    checks.check_kv_cache_bytes_mha(student, 24, 2048, 1000, 0.5)
    checks.check_kv_cache_bytes_mha_rejects_negative(student, 32, 4096, -1, 2)
    with pytest.raises(CheckFailed, match="count the values as well as the keys"):
        checks.check_kv_cache_bytes_mha(keys_only, 32, 5120, 1, 2)
    with pytest.raises(CheckFailed, match="that is bits"):
        checks.check_kv_cache_bytes_mha(in_bits, 32, 5120, 1, 2)
    with pytest.raises(CheckFailed, match="ValueError"):
        checks.check_kv_cache_bytes_mha_rejects_negative(keys_only, 32, 4096, -1, 2)
    cells = {nbgrader_meta(cell).get("grade_id"): cell for cell in _solution_cells("lab02-prefill-vs-decode", "03_decode")}
    assert {"kv_cache_bytes_mha", "test_kv_cache_bytes_mha_visible", "test_kv_cache_bytes_mha_hidden"} <= set(cells)
    assert "### BEGIN HIDDEN TESTS" in "".join(cells["test_kv_cache_bytes_mha_hidden"]["source"])


# ------------------------------------------------------------------------------------- the format

GOOD = '''
lab = "lab42-test"

[[question]]
grade_id = "written_one"
notebook = "01_first"
notes = "Accept any reason."

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
    assert question.key == "01_first/written_one" and questions.points == 3 and question.notes == "Accept any reason."
    assert question.criterion("a").levels() == (2.0, 1.0, 0.0)
    assert question.criterion("b").levels() == (1.0, 0.0)
    assert question.rubric_hash == _load(tmp_path, GOOD.replace("Says why.", "Says why, reworded.")).questions[0].rubric_hash
    assert question.rubric_hash != _load(tmp_path, GOOD.replace("points = 1, when", "points = 0.5, when")).questions[0].rubric_hash


@pytest.mark.parametrize("change, message", [
    (('notes = "Accept any reason."', 'notes = "x"\nprompt = "Why?"'), "prompt: these live in the solution notebook"),
    (('notes = "Accept any reason."', 'points = 3'), "points: these live in the solution notebook"),
    (('grade_id = "written_one"', 'grade_id = "one"'), "written_<name>"),
    (("points = 1, when", "points = 2, when"), "must be less than the criterion's 2"),
    (('id = "b"', 'id = "a"'), "criterion ids repeat: a"),
    (('notes = "Accept any reason."', 'answer = "x"'), "unknown field(s) answer"),
    (('notebook = "01_first"', 'notebook = "../first"'), "file name without .ipynb"),
    (("points = 2\ntext", "points = -2\ntext"), "above 0"),
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
    text = GOOD.split("[[question.criteria]]")[0] + criteria
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
