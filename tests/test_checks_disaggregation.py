"""course_lib.checks.disaggregation: the worked example's numbers, the notebook's answer passes,
and unit mistakes fail with a hint that names the unit."""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest

from course_lib.checks import CheckFailed
from course_lib.checks import disaggregation as checks

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / "05_beyond_the_basics.ipynb"
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)
LLAMA3_8B_OVER_IB = (2000, 32, 8, 128, 2, 50, 1.0)


def _answer(source: str | None = None):
    if source is None:
        notebook = nbformat.read(SOLUTION, as_version=4)
        source = SOLUTION_MARKER.sub("", next(cell.source for cell in notebook.cells
                                              if cell.metadata.get("nbgrader", {}).get("grade_id") == "kv_transfer_ms"))
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<answer kv_transfer_ms>", "exec"), namespace)
    return namespace["kv_transfer_ms"]


def test_worked_example_numbers():
    assert math.isclose(checks.reference_kv_transfer_ms(*LLAMA3_8B_OVER_IB), 1.0 + 262_144_000 / 50e9 * 1e3)
    assert math.isclose(checks.reference_kv_transfer_ms(2000, 32, 8, 128, 2, 1.25), 209.7152)


def test_reference_answer_passes():
    student = _answer()
    checks.check_kv_transfer_ms(student, *LLAMA3_8B_OVER_IB)
    checks.check_kv_transfer_ms(student, 0, 32, 8, 128, 2, 50, 0.5)
    checks.check_kv_transfer_ms(student, 517, 61, 1, 576, 2, 900)


@pytest.mark.parametrize("body, phrase", [
    ("return latency_ms + num_tokens * num_layers * num_kv_heads * head_dim * bytes_per_element / (link_gb_per_s * 1e9) * 1000",
     "K \\*and\\* V"),
    ("return latency_ms + num_tokens * 2 * num_layers * num_kv_heads * head_dim * bytes_per_element / (link_gb_per_s * 2**30) * 1000",
     "not 2\\*\\*30"),
    ("return latency_ms + num_tokens * 2 * num_layers * num_kv_heads * head_dim * bytes_per_element / (link_gb_per_s * 1e9)",
     "milliseconds"),
    ("return num_tokens * 2 * num_layers * num_kv_heads * head_dim * bytes_per_element / (link_gb_per_s * 1e9) * 1000",
     "add latency_ms"),
])
def test_unit_mistakes_fail_with_a_hint(body, phrase):
    source = ("def kv_transfer_ms(num_tokens, num_layers, num_kv_heads, head_dim, bytes_per_element, link_gb_per_s,\n"
              f"                   latency_ms=0.0):\n    {body}\n")
    with pytest.raises(CheckFailed, match=phrase):
        checks.check_kv_transfer_ms(_answer(source), *LLAMA3_8B_OVER_IB)


def test_reexporting_the_reference_earns_nothing():
    with pytest.raises(CheckFailed, match="reference"):
        checks.check_kv_transfer_ms(checks.reference_kv_transfer_ms, *LLAMA3_8B_OVER_IB)
