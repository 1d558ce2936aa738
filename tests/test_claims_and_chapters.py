"""The notebooks' claims (course_lib.claims) and imports of earlier chapters' answers (course_lib.chapters)."""

import inspect
import json

import nbformat
import pytest

from autograde import authoring
from course_lib.chapters import ChapterNotFound, answers_from
from course_lib.claims import CLAIMS_LOG_ENVIRONMENT, claim, skip_claim


def test_a_claim_that_holds_prints_the_numbers(capsys):
    result = claim("continuous beats static", 2.3 > 1.7, measured="2.3 against 1.7 tokens/s")
    assert result.held is True
    assert "Claim held" in capsys.readouterr().out


def test_a_claim_that_fails_says_the_likely_reason_and_never_raises(capsys):
    result = claim("p99 explodes", False, measured="1.1 s against 1.0 s", otherwise="the machine was busy")
    assert result.held is False
    out = capsys.readouterr().out
    assert "did not hold" in out and "the machine was busy" in out


def test_a_claim_whose_condition_raises_is_not_checked_rather_than_failing():
    result = claim("needs a number", lambda: 1 / 0, show=False)
    assert result.held is None and "ZeroDivisionError" in result.line()


def test_a_cell_ending_in_a_claim_shows_the_verdict_once(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    claim("printed by the call", True)._ipython_display_()      # what a notebook does with a cell's last value
    assert capsys.readouterr().out.count("printed by the call") == 1 and not shown
    claim("not printed", True, show=False)._ipython_display_()
    assert len(shown) == 1 and "not printed" in shown[0].data


def test_claims_are_logged_for_the_benchmark(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(CLAIMS_LOG_ENVIRONMENT, str(log))
    claim("one", True, show=False)
    claim("two", False, show=False)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["statement"], r["held"]) for r in records] == [("one", True), ("two", False)]


def test_a_skipped_claim_says_why_and_is_logged_as_skipped(tmp_path, monkeypatch, capsys):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(CLAIMS_LOG_ENVIRONMENT, str(log))
    result = skip_claim("the fused kernel is 1.5x faster", "needs a GPU")
    assert result.held is None and result.skipped == "needs a GPU"
    out = capsys.readouterr().out
    assert "skipped" in out and "the fused kernel is 1.5x faster" in out and "needs a GPU" in out
    record = json.loads(log.read_text())
    assert record["skipped"] == "needs a GPU" and record["held"] is None
    with pytest.raises(ValueError, match="reason"):
        skip_claim("a claim", " ")


def test_a_claim_needs_a_statement():
    with pytest.raises(ValueError, match="statement"):
        claim("  ", True)


def _write_chapter(folder, answer_source, extra_cells=()):
    cells = [authoring.code("%matplotlib inline\nimport math\nfrom pathlib import Path"),
             authoring.code("print('worked example: must not run')\nraise SystemExit"),
             authoring.answer("helper", answer_source),
             authoring.tests("helper_tests", 1, "raise AssertionError('tests must not run')"),
             *extra_cells]
    nbformat.write(authoring.notebook(cells), folder / "02_load.ipynb")


def test_answers_from_runs_only_the_imports_and_the_answer_cells(tmp_path):
    _write_chapter(tmp_path, "def area(r):\n    ### BEGIN SOLUTION\n    return math.pi * r * r\n    ### END SOLUTION")
    chapter = answers_from("02_load", folder=tmp_path)
    assert chapter.area(1.0) == pytest.approx(3.14159, rel=1e-5)
    assert "math.pi" in inspect.getsource(chapter.area)  # shipped to workers by its source


def test_answers_from_reads_the_file_as_saved_now(tmp_path):
    _write_chapter(tmp_path, "def answer():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION")
    assert answers_from("02_load.ipynb", folder=tmp_path).answer() == 1
    _write_chapter(tmp_path, "def answer():\n    ### BEGIN SOLUTION\n    return 2\n    ### END SOLUTION")
    assert answers_from("02_load", folder=tmp_path).answer() == 2


def test_answers_from_a_missing_notebook_names_it_and_the_folder(tmp_path):
    _write_chapter(tmp_path, "x = 1\n### BEGIN SOLUTION\n### END SOLUTION")
    with pytest.raises(ChapterNotFound, match="03_admission.ipynb.*02_load"):
        answers_from("03_admission", folder=tmp_path)
    with pytest.raises(ValueError, match="chapter must be"):
        answers_from("../02_load", folder=tmp_path)


def test_an_error_in_an_answer_cell_names_the_cell(tmp_path):
    _write_chapter(tmp_path, "### BEGIN SOLUTION\nundefined_name + 1\n### END SOLUTION")
    with pytest.raises(NameError) as raised:
        answers_from("02_load", folder=tmp_path)
    assert "answer cell 'helper'" in "".join(__import__("traceback").format_tb(raised.value.__traceback__))
