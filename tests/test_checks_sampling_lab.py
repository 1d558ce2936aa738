"""The chapter-5 sampling checks (course_lib.checks.sampling) accept the reference filters and reject
typical buggy ones with feedback that names the mistake.

The reference answers come from the solution notebook's answer cells (run with exec, the notebook is
not run). One slow test uses SmolLM2's real next-token logits.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import sampling as checks

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab01-text-to-tensors" / "05_pipeline.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab01-text-to-tensors"
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)
SAMPLING_ANSWERS = ("temperature_top_k", "top_p", "min_p")
WORKED = torch.tensor([[2.0, 1.0, 0.0, -1.0]])


def _filters(replacements: dict[str, str] | None = None) -> dict:
    notebook = nbformat.read(SOLUTION, as_version=4)
    namespace = {"__name__": "__main__", "torch": torch}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in SAMPLING_ANSWERS:
            source = (replacements or {}).get(grade_id, SOLUTION_MARKER.sub("", cell.source))
            exec(compile(source, f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _define(source: str):
    namespace = {"torch": torch, "__name__": "__main__"}
    exec(source, namespace)
    return next(value for name, value in namespace.items() if callable(value) and name.endswith(("filter", "temperature")))


@pytest.fixture(scope="module")
def reference():
    return _filters()


def _inputs():
    yield WORKED
    yield checks.tied_logits()
    for seed in range(4):
        yield checks.random_logits(seed=seed, num_seqs=4, vocab_size=64)
    yield checks.random_logits(seed=9, num_seqs=2, vocab_size=2000, scale=6.0)


def test_reference_filters_pass_every_check(reference):
    for logits in _inputs():
        for temperature in (0.3, 1.0, 1.7, 0, -1.0):
            checks.check_apply_temperature(reference["apply_temperature"], logits, temperature)
        for top_k in (0, 1, 2, 3, 5, 10_000):
            checks.check_top_k_filter(reference["top_k_filter"], logits, top_k)
        for top_p in (0.05, 0.5, 0.8, 0.9, 0.999, 1.0):
            checks.check_top_p_filter(reference["top_p_filter"], logits, top_p)
        for min_p in (0.0, 0.05, 0.2, 0.5, 1.0):
            checks.check_min_p_filter(reference["min_p_filter"], logits, min_p)


def test_worked_example_numbers(reference):
    """The table of section 5: probabilities after each filter, rounded as printed."""
    probs = torch.softmax(WORKED, dim=1)
    torch.testing.assert_close(probs, torch.tensor([[0.644, 0.237, 0.087, 0.032]]), atol=5e-4, rtol=0)
    top_p = torch.softmax(reference["top_p_filter"](WORKED, 0.9), dim=1)
    torch.testing.assert_close(top_p, torch.tensor([[0.665, 0.245, 0.090, 0.0]]), atol=5e-4, rtol=0)
    min_p = torch.softmax(reference["min_p_filter"](WORKED, 0.2), dim=1)
    torch.testing.assert_close(min_p, torch.tensor([[0.731, 0.269, 0.0, 0.0]]), atol=5e-4, rtol=0)


def test_demo_top_p_that_drops_the_crossing_token_fails():
    answers = runpy.run_path(str(DEMO_SPECS / "buggy-top-p-drops-crossing-token.py"))["ANSWERS"]
    student = _filters(answers)
    with pytest.raises(CheckFailed, match="keeps the wrong tokens") as failure:
        checks.check_top_p_filter(student["top_p_filter"], WORKED, 0.9)
    assert "crosses top_p is kept" in str(failure.value)


def test_top_k_without_ties_fails_only_on_ties():
    top_k_filter = _define('''
def top_k_filter(logits, top_k):
    if top_k <= 0 or top_k >= logits.shape[-1]:
        return logits.clone()
    keep = torch.topk(logits, top_k, dim=-1).indices
    mask = torch.ones_like(logits, dtype=torch.bool).scatter(-1, keep, False)
    return logits.masked_fill(mask, float("-inf"))
''')
    checks.check_top_k_filter(top_k_filter, checks.random_logits(seed=1), 5)
    with pytest.raises(CheckFailed, match="keeps the wrong tokens") as failure:
        checks.check_top_k_filter(top_k_filter, checks.tied_logits(), 2)
    assert "ties" in str(failure.value)


def test_top_k_that_crashes_on_large_k_fails_with_the_call():
    top_k_filter = _define('''
def top_k_filter(logits, top_k):
    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))
''')
    with pytest.raises(CheckFailed, match=r"top_k_filter\(logits of shape \[1, 4\], 10\) raised RuntimeError"):
        checks.check_top_k_filter(top_k_filter, WORKED, 10)


def test_temperature_that_accepts_zero_fails():
    apply_temperature = _define('''
def apply_temperature(logits, temperature):
    return logits / temperature
''')
    checks.check_apply_temperature(apply_temperature, WORKED, 0.5)
    with pytest.raises(CheckFailed, match="returned instead of raising ValueError"):
        checks.check_apply_temperature(apply_temperature, WORKED, 0)


def test_temperature_that_multiplies_fails():
    apply_temperature = _define('''
def apply_temperature(logits, temperature):
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    return logits * temperature
''')
    with pytest.raises(CheckFailed, match="differs from logits / temperature"):
        checks.check_apply_temperature(apply_temperature, WORKED, 0.5)


def test_filter_that_changes_its_input_fails():
    min_p_filter = _define('''
def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, dim=-1)
    logits[probs < min_p * probs.max(dim=-1, keepdim=True).values] = float("-inf")
    return logits
''')
    with pytest.raises(CheckFailed, match="changed its input tensor"):
        checks.check_min_p_filter(min_p_filter, WORKED, 0.2)


def test_min_p_on_logits_instead_of_probabilities_fails():
    min_p_filter = _define('''
def min_p_filter(logits, min_p):
    threshold = min_p * logits.max(dim=-1, keepdim=True).values
    return logits.masked_fill(logits < threshold, float("-inf"))
''')
    checks.check_min_p_filter(min_p_filter, WORKED, 0.2)  # by luck the worked example keeps the same 2 tokens
    with pytest.raises(CheckFailed, match="keeps the wrong tokens") as failure:
        checks.check_min_p_filter(min_p_filter, checks.random_logits(seed=5), 0.1)
    assert "compare probabilities" in str(failure.value)


def test_top_p_one_must_keep_tiny_tokens():
    top_p_filter = _define('''
def top_p_filter(logits, top_p):
    probs = torch.softmax(logits, dim=-1)
    sorted_probs, ids = torch.sort(probs, dim=-1, descending=True)
    drop_sorted = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, ids, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))
''')
    checks.check_top_p_filter(top_p_filter, WORKED, 0.9)  # right rule, no special case for 1
    with pytest.raises(CheckFailed, match="keeps the wrong tokens"):
        checks.check_top_p_filter(top_p_filter, checks.tied_logits(), 1.0)


def test_top_p_ties_may_be_broken_either_way():
    top_p_filter = _define('''
def top_p_filter(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probs = torch.softmax(logits, dim=-1)
    flipped = probs.flip(-1)                  # ties now broken towards the highest id
    sorted_probs, ids = torch.sort(flipped, dim=-1, descending=True, stable=True)
    drop_sorted = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, ids, drop_sorted).flip(-1)
    return logits.masked_fill(drop, float("-inf"))
''')
    checks.check_top_p_filter(top_p_filter, checks.tied_logits(), 0.5)


def test_reexported_reference_filter_fails():
    from course_lib.sampling import top_p_filter

    with pytest.raises(CheckFailed, match="reference implementation"):
        checks.check_top_p_filter(top_p_filter, WORKED, 0.9)


@pytest.mark.slow
def test_reference_filters_pass_on_smollm2_logits(reference):
    logits = checks.next_token_logits("My favourite fruit is")
    assert logits.shape == (1, 49_152)   # SmolLM2's vocabulary
    checks.check_apply_temperature(reference["apply_temperature"], logits, 0.7)
    checks.check_top_k_filter(reference["top_k_filter"], logits, 40)
    checks.check_top_p_filter(reference["top_p_filter"], logits, 0.9)
    checks.check_min_p_filter(reference["min_p_filter"], logits, 0.05)


def test_temperature_zero_must_raise_the_documented_value_error(reference):
    checks.check_apply_temperature(reference["apply_temperature"], checks.random_logits(seed=0), 0)

    def divides_anyway(logits, temperature):
        return logits / max(temperature, 1e-9)

    with pytest.raises(CheckFailed, match="returned instead of raising ValueError"):
        checks.check_apply_temperature(divides_anyway, checks.random_logits(seed=0), 0)

    def asserts(logits, temperature):
        assert temperature > 0
        return logits / temperature

    with pytest.raises(CheckFailed, match="raised AssertionError; the documented error is ValueError"):
        checks.check_apply_temperature(asserts, checks.random_logits(seed=0), 0)


def test_demo_top_k_that_keeps_exactly_k_fails_the_visible_tie_with_a_hint():
    answers = runpy.run_path(str(DEMO_SPECS / "buggy-top-k-exactly-k.py"))["ANSWERS"]
    namespace = {"torch": torch}
    exec(answers["temperature_top_k"], namespace)
    worked = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    checks.check_top_k_filter(namespace["top_k_filter"], worked, 3)   # no tie: right
    with pytest.raises(CheckFailed) as failure:
        checks.check_top_k_filter(namespace["top_k_filter"], torch.tensor([[3.0, 1.0, 1.0, 0.0]]), 2)
    message = str(failure.value)
    assert "expected: [0, 1, 2]" in message and "ties at the k-th place all stay" in message
