"""A tiny class for the marking tests: written questions, and graded notebooks that answer them.

``write_questions`` writes the rubric file and the solution notebook whose cells hold the prompts and
model answers; ``fixture_questions`` reads them joined (``knowledge.load_lab``).
``write_class`` lays out what ``course grade`` leaves behind, as far as ``course mark`` reads it:
``OUT/autograded/<student>/<lab>/<notebook>.ipynb`` holding nbgrader's manually graded answer cells
(with the checksum the release gave them, so an untouched cell reads as blank), with no grading run.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from autograde.authoring import code, markdown, notebook, written_question

LAB = "lab99-marking-demo"
NOTEBOOK = "01_questions"

QUESTIONS_TOML = '''
lab = "lab99-marking-demo"

[[question]]
grade_id = "written_cache"
notebook = "01_questions"
notes = "Accept any correct reason."

[[question.criteria]]
id = "reuse"
points = 2
text = "Earlier keys and values never change, so they can be kept."
partial = [ { points = 1, when = "says 'to save time' without what is kept" } ]

[[question.criteria]]
id = "cost"
points = 1
text = "Without it every step recomputes the whole prefix."

[[question]]
grade_id = "written_batching"
notebook = "01_questions"

[[question.criteria]]
id = "weights"
points = 1
text = "Weight reads are shared by the batch."

[[question.criteria]]
id = "memory_bound"
points = 1
text = "Decode is memory-bound, so the step time barely grows."
'''


PROMPTS = {"written_cache": ("Why does decoding need a KV cache?", 3,
                             "Keys and values of earlier tokens never change, so the engine keeps them instead of "
                             "recomputing the prefix."),
           "written_batching": ("Why does batching make decode faster per token?", 2,
                                "Each weight read from memory serves every sequence of the batch.")}


def solution_notebook():
    """The source notebook: each question's prompt cell and its answer cell holding the model answer."""
    cells = [markdown("# Written questions"), code("x = 1")]
    for grade_id, (prompt, points, model_answer) in PROMPTS.items():
        cells += written_question(grade_id, points, prompt, model_answer)
    return notebook(cells)


def write_questions(folder: Path) -> Path:
    """The rubric file in ``folder`` and the solution notebook in ``folder/solutions/<lab>/``; returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{LAB}.toml"
    path.write_text(QUESTIONS_TOML, encoding="utf-8")
    (folder / "solutions" / LAB).mkdir(parents=True, exist_ok=True)
    nbformat.write(solution_notebook(), folder / "solutions" / LAB / f"{NOTEBOOK}.ipynb")
    return path


def fixture_questions(folder: Path):
    """The fixture's questions, rubrics joined to their cells (written by ``write_questions`` if need be)."""
    from autograde.knowledge import load_lab

    if not (folder / f"{LAB}.toml").is_file():
        write_questions(folder)
    return load_lab(LAB, folder, folder / "solutions")


def release_notebook():
    """The notebook as released: the answer cells hold nbgrader's stub, with the checksum nbgrader gave it."""
    from nbgrader.utils import compute_checksum

    cells = [markdown("# Written questions"), code("x = 1")]
    for grade_id, points in (("written_cache", 3), ("written_batching", 2)):
        prompt, answer = written_question(grade_id, points, "A question.", "A model answer.")
        answer.source = "YOUR ANSWER HERE"
        answer.metadata["nbgrader"]["checksum"] = compute_checksum(answer)
        cells += [prompt, answer]
    return notebook(cells)


def write_class(out_dir: Path, answers: dict[str, dict[str, str | None]]) -> Path:
    """Graded notebooks for each student: ``{student: {grade_id: text}}``; a grade_id left out keeps
    the stub (blank), a text of None deletes the cell (missing)."""
    for student, texts in answers.items():
        nb = release_notebook()
        kept = []
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in texts and texts[grade_id] is None:
                continue
            if grade_id in texts:
                cell.source = texts[grade_id]
            kept.append(cell)
        nb.cells = kept
        folder = Path(out_dir) / "autograded" / student / LAB
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{NOTEBOOK}.ipynb")
    return Path(out_dir)


def write_results(out_dir: Path, answers: dict[str, dict[str, str | None]], solutions: Path) -> Path:
    """What else ``course grade`` leaves for the class of ``write_class``: a result file per student (one
    passed test cell of 1 point, and the written answers as the grader leaves them: awaiting a TA,
    blank, missing), a feedback page per student, and class.json naming ``solutions``."""
    import json

    from autograde.feedback import finish_page
    from autograde.results import CellResult, LabResult, NotebookResult, written_cell
    from autograde.store import ResultStore, StoredResult

    store = ResultStore(out_dir)
    for student, texts in answers.items():
        notebook = NotebookResult(NOTEBOOK, "graded", cells=[CellResult("test_warmup", 1.0, 1.0, "passed")])
        for grade_id, (_, points, _) in PROMPTS.items():
            text = texts.get(grade_id, "YOUR ANSWER HERE")
            notebook.cells.append(written_cell(grade_id, float(points),
                                               None if text is None else {"source": text, "cell_type": "markdown"}))
        page = finish_page("<html><head><title>feedback</title></head><body><p>the graded notebook</p></body></html>",
                           notebook)
        result = LabResult(student, LAB, [notebook], timestamp="2026-01-10 12:00:00 UTC")
        store.save(StoredResult(result, {}, True), feedback={NOTEBOOK: page})
    (Path(out_dir) / "class.json").write_text(json.dumps({"solutions": str(solutions), "device": "cpu",
                                                          "timeout": 60, "problems": []}), encoding="utf-8")
    return Path(out_dir)
