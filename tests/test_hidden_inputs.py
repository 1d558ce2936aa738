"""No hidden test takes its inputs from the kit (tests/hidden_inputs.py reads the solution notebooks).

The kit ships ``course_lib`` whole, checks included: a hidden test whose cases a shipped function
returns (``checks.more_streams()``), or whose visible twin slices a shipped case list
(``checks.admission_cases()[:checks.VISIBLE_ADMISSION_CASES]``), shows its inputs to every student.
The first test holds the course to that; the others prove on small notebooks that the rule catches
each pattern and lets the honest ones through, so a green run means something.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.hidden_inputs import findings, lab_findings

SERVING = "from course_lib.checks import serving as checks\n"
PIPELINE = "from course_lib.checks import pipeline as checks\n"


def test_no_hidden_test_of_any_lab_takes_its_inputs_from_the_kit():
    found = findings()
    assert not found, "hidden inputs a student can compute from the kit:\n" + "\n".join(map(str, found))


def _lab(tmp_path: Path, *test_cells: str) -> Path:
    """A lab folder with one notebook: an answer cell, then each source as a graded test cell."""
    cells = [nbformat.v4.new_code_cell("def answer(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION",
                                       metadata={"nbgrader": {"grade_id": "answer", "solution": True}})]
    cells += [nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"grade_id": f"test_{index}", "grade": True,
                                                                       "points": 1}})
              for index, source in enumerate(test_cells)]
    lab = tmp_path / "lab99-example"
    lab.mkdir(exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), lab / "01_example.ipynb")
    return lab


def _codes(lab: Path) -> list[str]:
    return [finding.code for finding in lab_findings(lab)]


@pytest.mark.parametrize("hidden, flagged", [
    ("for d, case in checks.more_cases():\n    checks.check_case(answer, case, d)",   # the cases the kit ships
     ["checks.more_cases()", "checks.check_case(answer, case, d)"]),
    ("checks.check_scheduler_scenario(answer, 'all_fit')", ["checks.check_scheduler_scenario(answer, 'all_fit')"]),
    ("chosen = checks.cases()\nchecks.check_case(answer, chosen)", ["checks.cases()", "checks.check_case(answer, "
                                                                    "chosen)"]),
])
def test_a_hidden_region_whose_cases_come_from_the_kit_is_found(tmp_path, hidden, flagged):
    # 'all_fit' is a scenario name course_lib/checks/pipeline.py spells: a key into data it ships.
    source = f"{PIPELINE}checks.check_case(answer, 1)\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS\n"
    assert _codes(_lab(tmp_path, source)) == flagged


def test_a_hidden_loop_over_a_shipped_list_is_found_though_its_call_reads_like_the_visible_one(tmp_path):
    source = (f"{SERVING}for d, case in checks.cases()[:4]:\n    checks.check_case(answer, case, d)\n"
              "### BEGIN HIDDEN TESTS\nfor d, case in checks.cases():\n    checks.check_case(answer, case, d)\n"
              "### END HIDDEN TESTS\n")
    assert _codes(_lab(tmp_path, source)) == ["checks.check_case(answer, case, d)", "checks.cases()[:4]"]


def test_a_visible_test_that_slices_a_shipped_case_list_is_found(tmp_path):
    source = f"{SERVING}for case in checks.cases()[:checks.VISIBLE_CASES]:\n    checks.check_case(answer, case)\n"
    (finding,) = lab_findings(_lab(tmp_path, source))
    assert finding.code == "checks.cases()[:checks.VISIBLE_CASES]" and "slice" in finding.why


@pytest.mark.parametrize("hidden", [
    "checks.check_case(answer, checks.random_case(seed=12))",             # a generator and a seed of its own
    "more = [('a stream', [(0.5, 'data: x')])]\nfor d, lines in more:\n    checks.check_case(answer, lines, d)",
    "for seed in range(3):\n    checks.check_case(answer, checks.random_case(seed))",
    "checks.check_case(answer, checks.small_config(), False)",           # a public fixture, used its own way
    "import torch\nchecks.check_case(answer, checks.LLAMA2_7B, torch.float16)",
    "checks.check_case(answer, checks.event({'role': 'assistant'}))",   # strings in a literal are data
    "checks.check_case(answer, 'a prompt the module never spells')",
    "def scenario(h):\n    h.add(3)\nchecks.check_case(answer, checks.Scenario(scenario, num_blocks=3))",
    "checks.check_case(answer, checks.visible_fixture())",              # the same call the visible test makes
])
def test_hidden_inputs_written_in_the_region_pass(tmp_path, hidden):
    source = (f"{SERVING}checks.check_case(answer, checks.visible_fixture())\n"
              f"### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS\n")
    assert _codes(_lab(tmp_path, source)) == []


def test_a_hidden_region_inside_a_block_is_read(tmp_path):
    source = (f"{SERVING}if True:\n    checks.check_case(answer, 1)\n    ### BEGIN HIDDEN TESTS\n"
              "    checks.check_case(answer, checks.more_cases())\n    ### END HIDDEN TESTS\n")
    assert _codes(_lab(tmp_path, source)) == ["checks.check_case(answer, checks.more_cases())"]
