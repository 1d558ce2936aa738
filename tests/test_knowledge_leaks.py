"""The scan for model answers and rubric wording where students can read them (autograde.knowledge.leaks):
found however a folder re-wraps, re-cases, escapes or marks up the text; not fooled by what students
are given anyway; and, today, nothing of the kind in the library a kit ships, the README or the book."""

from __future__ import annotations

import html
from pathlib import Path

import nbformat
import pytest

from autograde.knowledge import labs_with_questions, load_lab
from autograde.knowledge.leaks import WINDOW_WORDS, find_answer_leaks, given_text, windows

ROOT = Path(__file__).resolve().parent.parent
LAB = "lab02-prefill-vs-decode"
KEY = "03_decode/written_decode_memory_bound"


@pytest.fixture(scope="module")
def questions():
    return [load_lab(LAB)]


@pytest.fixture(scope="module")
def question(questions):
    return questions[0].question(KEY)


def _paragraph(question) -> str:
    return question.model_answer.split("\n\n")[1]     # (b): a paragraph of the model answer


def test_a_model_answer_pasted_into_a_kit_file_is_found_with_its_line(tmp_path, questions, question):
    (tmp_path / "README.md").write_text("# Notes\n\nSome text.\n\n" + _paragraph(question) + "\n", encoding="utf-8")
    (leak,) = find_answer_leaks(tmp_path, questions)
    assert leak.path == "README.md" and leak.where == "file, line 5"
    assert leak.origin == f"{LAB} {KEY}: model answer"
    assert KEY in str(leak)


def test_rewrapping_recasing_markdown_and_html_escaping_do_not_hide_it(tmp_path, questions, question):
    words = _paragraph(question).split()
    rewrapped = "\n".join(" ".join(words[start:start + 5]) for start in range(0, len(words), 5)).upper()
    (tmp_path / "notes.txt").write_text(rewrapped.replace("BATCH", "**batch**"), encoding="utf-8")
    page = f"<html><body><p>{html.escape(_paragraph(question))}</p><script>x()</script></body></html>"
    (tmp_path / "feedback.html").write_text(page, encoding="utf-8")
    assert sorted(leak.path for leak in find_answer_leaks(tmp_path, questions)) == ["feedback.html", "notes.txt"]


def test_a_notebook_cell_or_output_holding_it_is_named(tmp_path, questions, question):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A chapter"),
        nbformat.v4.new_code_cell("print(answer)", outputs=[nbformat.v4.new_output("stream", text=_paragraph(question))]),
    ])
    nbformat.write(nb, tmp_path / "03_decode.ipynb")
    (leak,) = find_answer_leaks(tmp_path, questions)
    assert leak.where.startswith("cell 1 (code)")


def test_rubric_criteria_and_notes_for_tas_count_as_answers_too(tmp_path, questions, question):
    (tmp_path / "a.md").write_text(question.criterion("long_context").text, encoding="utf-8")
    (tmp_path / "b.md").write_text(question.notes, encoding="utf-8")
    origins = sorted(leak.origin for leak in find_answer_leaks(tmp_path, questions))
    assert origins == [f"{LAB} {KEY}: criterion long_context", f"{LAB} {KEY}: notes for TAs"]


def test_what_students_are_given_is_not_a_leak(tmp_path, questions, question):
    """The prompt itself (in the release after phase 2), and text the release notebooks already give."""
    (tmp_path / "prompt.md").write_text(question.prompt, encoding="utf-8")
    assert find_answer_leaks(tmp_path, questions) == []
    given_sentence = " ".join(_paragraph(question).split()[:WINDOW_WORDS + 4])
    (tmp_path / "chapter.md").write_text(given_sentence, encoding="utf-8")
    assert find_answer_leaks(tmp_path, questions)     # not given: a leak
    assert find_answer_leaks(tmp_path, questions, given=windows(given_sentence)) == []


def test_short_common_phrases_are_no_fingerprint():
    assert windows("the request at the head of the queue") == set()
    words = " ".join(f"w{index}" for index in range(WINDOW_WORDS + 1))
    assert windows(words) == {" ".join(words.split()[:-1]), " ".join(words.split()[1:])}


def test_nothing_a_kit_ships_or_the_book_shows_holds_a_model_answer_or_rubric():
    """course_lib (the kit's library), the release, the README and the book, today: phase 2 wires the
    same scan into `course kit` and into feedback before grades are released."""
    labs = [load_lab(lab) for lab in labs_with_questions()]
    given = given_text(ROOT / "labs")
    leaks = []
    for folder in (ROOT / "course_lib", ROOT / "book"):
        leaks += find_answer_leaks(folder, labs, given=given)
    leaks += find_answer_leaks(ROOT / "README.md", labs, given=given)
    assert not leaks, "\n".join(map(str, leaks))
