"""Labs 0.1 and 0.2 in their student kits: the wrong answers new students wrote fail a visible test.

Tried as new students would (issue 35), these wrong answers passed every visible test of their chapter,
or failed one with a message that did not say what was expected. In a real kit (the visible tests replay
what the course's answers recorded, ``checks.fixtures``), each demo student below runs the visible test
cell that must catch its bug, in a kernel on the kit's student edition, and:

- that cell fails, with a message that names the bug (the phrase below);
- where the check leaves the recorded path (``OffTheRecord``: an answer that asks the reference what the
  course's answer never asked), the message says what the reference did at that point;
- the reference answers pass the same cells.

Only the answer cells, the imports of the chapter and the named test cells run, one kernel per chapter.
"""

from __future__ import annotations

import ast
import re
import runpy
import shutil
from pathlib import Path

import nbformat
import pytest

from autograde.demos import solution_answer
from autograde.kit import build_kit
from course_lib.handin.notebooks import nbgrader_meta
from course_lib.runner.sandbox import NONE, Isolation
from course_lib.runner.student import StudentKernel

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
LAB01, LAB02 = "lab01-text-to-tensors", "lab02-prefill-vs-decode"

# (lab, demo student) -> (its chapter, the visible test cell that must fail, a phrase its message must hold)
MUST_FAIL_VISIBLY = {
    (LAB01, "buggy-int4-floor-division"): ("01_tokenization", "test_bytes_per_element", "integer division (//)"),
    (LAB01, "buggy-bpe-ties-first-seen"): ("01_tokenization", "test_train_bpe_visible", "a tie"),
    (LAB01, "buggy-kv-query-heads"): ("02_training_vs_inference", "test_inference_memory",
                                      "num_kv_heads = 3, not num_q_heads = 9"),
    (LAB01, "buggy-kv-cache-always-fp16"): ("02_training_vs_inference", "test_inference_memory",
                                            "kv_precision is 'int8'"),
    (LAB01, "buggy-waste-assumes-sorted"): ("03_kv_cache", "test_waste_breakdown_visible",
                                            "not listed in order of start"),
    (LAB01, "buggy-kv-bytes-no-valueerror"): ("03_kv_cache", "test_kv_cache_bytes",
                                              "returned instead of raising ValueError"),
    (LAB01, "buggy-move-unfinished-may-finish"): ("05_pipeline", "test_move",
                                                  "the arrows from WAITING go to RUNNING, FINISHED_ABORTED"),
    (LAB01, "buggy-top-k-exactly-k"): ("05_pipeline", "test_temperature_top_k", "ties at the k-th place all stay"),
    (LAB01, "buggy-admit-without-can-allocate"): ("05_pipeline", "test_scheduler_admission",
                                                  "the reference answer's run asked for BlockAllocator.can_allocate"),
    (LAB01, "buggy-fcfs-overtakes"): ("05_pipeline", "test_scheduler_admission",
                                      "asked for BlockAllocator.num_free_blocks (it was 2) (just after "
                                      "BlockAllocator.can_allocate([8, 9, 10, 11, 12, 13, 14, 15, 16]), which returned "
                                      "False)"),
    (LAB02, "buggy-flops-pass-one-token-long"): ("01_autoregression", "test_generation_flops", "one token too long"),
    (LAB02, "buggy-naive-ignores-scale"): ("02_prefill", "test_naive_attention_visible",
                                           "use the scale argument when it is given"),
    (LAB02, "buggy-generate-drops-eos"): ("03_decode", "test_generate_visible",
                                          "stop right before the end-of-sequence token"),
}
# What the scheduler's divergence must say besides: the scenario so far, and the rule at stake.
SCENARIO = {"buggy-fcfs-overtakes": ("so far: add a (8 prompt tokens", "nobody overtakes it")}
# Code cells a chapter's answers need besides its first cell (names its answers use).
EXTRA_PRELUDE = {
    "02_training_vs_inference": 'BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}',
    "05_pipeline": 'from course_lib.chapters import answers_from\nBlockAllocator = answers_from("04_paging").BlockAllocator',
}


def _notebook(folder: Path, lab: str, chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(folder / lab / f"{chapter}.ipynb", as_version=4)


def _answers(lab: str, chapter: str) -> dict[str, str]:
    notebook = _notebook(ROOT / "solutions", lab, chapter)
    return {nbgrader_meta(c)["grade_id"]: solution_answer(c.source) for c in notebook.cells
            if nbgrader_meta(c).get("solution") and not nbgrader_meta(c).get("grade")}


def _only_definitions(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return bool(tree.body) and all(isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))
                                   for node in tree.body)


def _prelude(lab: str, chapter: str) -> str:
    """The chapter's first code cell (its imports) and the helpers it gives (cells that only define)."""
    cells = [c for c in _notebook(ROOT / "solutions", lab, chapter).cells
             if c.cell_type == "code" and not nbgrader_meta(c).get("solution") and not nbgrader_meta(c).get("grade")]
    given = [c.source for c in cells[1:] if _only_definitions(c.source)]
    return "\n\n".join([cells[0].source, *given, EXTRA_PRELUDE.get(chapter, "")])


def _visible_test(kit: Path, lab: str, chapter: str, grade_id: str) -> str:
    (cell,) = [c for c in _notebook(kit / "labs", lab, chapter).cells if nbgrader_meta(c).get("grade_id") == grade_id]
    return cell.source


def _errors(outputs: list[dict]) -> list[tuple[str, str]]:
    return [(o.get("ename", ""), re.sub(r"\s+", " ", str(o.get("evalue", "")))) for o in outputs
            if o.get("output_type") == "error"]


@pytest.fixture(scope="module")
def kits(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("kits")
    return {LAB01: build_kit(ROOT, folder / "kit01", labs=[LAB01]).folder,
            LAB02: build_kit(ROOT, folder / "kit02", labs=[LAB02], unlock=[LAB01]).folder}


@pytest.fixture(scope="module")
def feedback(kits, tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """"student" -> the errors of its test cell; "reference:<test cell>" -> the reference answers' errors."""
    by_chapter: dict[tuple[str, str], list[tuple[str, str, str, str]]] = {}
    for (lab, student), (chapter, grade_id, phrase) in MUST_FAIL_VISIBLY.items():
        by_chapter.setdefault((lab, chapter), []).append((student, grade_id, phrase, chapter))
    results: dict[str, list[tuple[str, str]]] = {}
    for (lab, chapter), students in by_chapter.items():
        kit = kits[lab]
        workdir = tmp_path_factory.mktemp(chapter)
        if chapter == "05_pipeline":   # chapter 5 reads chapter 4's BlockAllocator from its saved notebook
            shutil.copy(ROOT / "autograde" / "demo_submissions" / "correct" / lab / "04_paging.ipynb", workdir)
        reference = _answers(lab, chapter)
        with StudentKernel(edition=kit, workdir=workdir, isolation=Isolation(NONE, "student's laptop")) as kernel:
            def run(answers: dict[str, str], grade_id: str) -> list[tuple[str, str]]:
                for source in answers.values():
                    assert not _errors(kernel.run_cell(source, 120)["outputs"])
                return _errors(kernel.run_cell(_visible_test(kit, lab, chapter, grade_id), 300)["outputs"])

            assert not _errors(kernel.run_cell(_prelude(lab, chapter), 300)["outputs"])
            for student, grade_id, _, _ in students:
                results[f"reference:{lab}/{grade_id}"] = run(reference, grade_id)
                spec = runpy.run_path(str(ROOT / "autograde" / "demo" / lab / f"{student}.py"))
                results[student] = run({**reference, **spec["ANSWERS"]}, grade_id)
    return results


def test_the_reference_answers_pass_the_visible_tests_in_the_kit(feedback):
    failing = {name: errors for name, errors in feedback.items() if name.startswith("reference:") and errors}
    assert not failing, failing


@pytest.mark.parametrize("lab, student", sorted(MUST_FAIL_VISIBLY))
def test_each_wrong_answer_fails_a_visible_test_in_the_kit_naming_its_bug(feedback, lab, student):
    _, grade_id, phrase = MUST_FAIL_VISIBLY[(lab, student)]
    errors = feedback[student]
    assert errors, f"{student}: {grade_id} passed in the kit"
    (ename, message), = errors[-1:]
    assert ename in ("CheckFailed", "OffTheRecord"), errors
    assert phrase in message, message
    for words in SCENARIO.get(student, ()):
        assert words in message, message
    if ename == "OffTheRecord":   # a divergence says what the reference did there, not only that the answers differ
        assert "the reference answer's run" in message and "BlockAllocator." in message, message
