"""The Lab 0.2 chapter-1 checks (course_lib.checks.autoregression) accept the reference answers and
reject each demo student's bug with feedback that names the mistake.

The FLOP count is also checked against a brute-force walk (one pass, one token at a time). The
timing checks run the answers on a lent function and a lent model whose calls the check records:
they must tell the minimum from the mean, and a decode step from a pass over the whole context.
"""

from __future__ import annotations

import math
import runpy
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from autograde.authoring import points_summary
from course_lib import measure
from course_lib.checks import CheckFailed
from course_lib.checks import autoregression as checks
from course_lib.kv_cache import KVCache
from course_lib.model import ModelConfig
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "01_autoregression"
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / f"{NOTEBOOK}.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"

TINY = ModelConfig(num_layers=2, hidden_size=12, num_q_heads=3, num_kv_heads=1, head_dim=4, vocab_size=10,
                   intermediate_size=8, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5)


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: every answer cell run, some replaced."""
    namespace = {"__name__": "__main__", "torch": torch, "time": time, "KVCache": KVCache}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo_specs() -> dict[str, dict]:
    specs = {path.stem: runpy.run_path(str(path)) for path in sorted(DEMO_SPECS.glob("*.py"))}
    return {name: spec for name, spec in specs.items() if NOTEBOOK in spec.get("EXPECTED", {})}


def _demo(name: str) -> dict:
    return _student(_demo_specs()[name]["ANSWERS"])


def _failure(check, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as caught:
        check(*args, **kwargs)
    return str(caught.value)


@pytest.fixture(scope="module")
def reference():
    return _student()


def _brute_force_flops(prompt_len: int, new_tokens: int, use_cache: bool, num_parameters: int,
                       config: ModelConfig) -> int:
    """FLOPs by walking the passes and the tokens of each pass one at a time."""
    per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    flops = 0
    sequence_length = prompt_len
    for step in range(new_tokens):
        positions = [sequence_length - 1] if use_cache and step > 0 else list(range(sequence_length))
        for position in positions:
            flops += 2 * num_parameters + per_key * (position + 1)
        sequence_length += 1
    return flops


# ---------------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt_len, new_tokens", [(1, 0), (1, 1), (3, 4), (1, 100), (17, 9), (200, 3)])
@pytest.mark.parametrize("use_cache", [False, True])
def test_reference_flops_match_a_brute_force_walk(prompt_len, new_tokens, use_cache):
    expected = _brute_force_flops(prompt_len, new_tokens, use_cache, 1_000, TINY)
    assert checks.reference_generation_flops(TINY, 1_000, prompt_len, new_tokens, use_cache) == expected


def test_outline_figures():
    assert checks.reference_generation_flops(TINY, 1_000, 2, 2, False) == 10_864   # the worked example
    assert checks.reference_generation_flops(TINY, 1_000, 2, 2, True) == 6_576


def test_reference_answer_passes_the_flops_check(reference):
    for prompt_len, new_tokens in [(1, 0), (1, 1), (3, 4), (1, 100), (64, 512)]:
        for use_cache in (False, True):
            checks.check_generation_flops(reference["generation_flops"], TINY, 777, prompt_len, new_tokens,
                                          use_cache)


def test_square_attention_is_rejected_with_a_hint():
    buggy = _demo("buggy-square-attention")
    message = _failure(checks.check_generation_flops, buggy["generation_flops"], TINY, 1_000, 2, 2, False)
    assert "n * (n + 1) / 2" in message


def test_flop_mistakes_get_their_hints():
    def weights_only(config, num_parameters, prompt_len, new_tokens, use_cache):
        tokens = prompt_len + new_tokens - 1 if use_cache else sum(prompt_len + k for k in range(new_tokens))
        return 2 * num_parameters * tokens

    assert "attention term is missing" in _failure(checks.check_generation_flops, weights_only, TINY, 10, 3, 4, True)

    def float_count(config, num_parameters, prompt_len, new_tokens, use_cache):
        return 0.5

    assert "must return an int" in _failure(checks.check_generation_flops, float_count, TINY, 10, 3, 4, True)


def test_counting_pass_one_as_a_decode_step_gets_its_own_hint(reference):
    def every_pass_one_token(config, num_parameters, prompt_len, new_tokens, use_cache):
        per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
        if not use_cache:
            return reference["generation_flops"](config, num_parameters, prompt_len, new_tokens, use_cache)
        return sum(2 * num_parameters + per_key * (prompt_len + k - 1) for k in range(1, new_tokens + 1))

    message = _failure(checks.check_generation_flops, every_pass_one_token, TINY, 1_000, 2, 2, True)
    assert "pass 1 is the prefill" in message and "n - 1" not in message

    def decode_without_its_own_key(config, num_parameters, prompt_len, new_tokens, use_cache):
        right = reference["generation_flops"](config, num_parameters, prompt_len, new_tokens, use_cache)
        per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
        return right - per_key * (new_tokens - 1) if use_cache else right

    assert "own key included" in _failure(checks.check_generation_flops, decode_without_its_own_key, TINY, 1_000, 2, 3,
                                          True)


def test_off_by_one_flop_counts_each_get_the_hint_that_names_them(reference):
    """Every usual off-by-one gets its own hint (the visible first case, P = 2, T = 2 without a cache, and
    with one): never the hint of another mistake."""
    def with_lengths(shift: int, extra_passes: int = 0):
        def generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache):
            per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
            total = 0
            for k in range(1, new_tokens + 1 + extra_passes):
                n = prompt_len + k - 1 + shift
                if use_cache and k > 1:
                    total += 2 * num_parameters + per_key * n
                else:
                    total += 2 * num_parameters * n + per_key * n * (n + 1) // 2
            return total
        return generation_flops

    def without_own_key(config, num_parameters, prompt_len, new_tokens, use_cache):
        per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
        total = 0
        for k in range(1, new_tokens + 1):
            n = prompt_len + k - 1
            total += (2 * num_parameters + per_key * n) if use_cache and k > 1 else \
                (2 * num_parameters * n + per_key * n * (n - 1) // 2)
        return total

    for use_cache in (False, True):
        one_too_long = _failure(checks.check_generation_flops, with_lengths(1), TINY, 1_000, 2, 2, use_cache)
        assert "one token too long" in one_too_long and "n * n" not in one_too_long, one_too_long
        assert "one pass too many" in _failure(checks.check_generation_flops, with_lengths(0, 1), TINY, 1_000, 2, 2,
                                               use_cache)
        assert "one pass too few" in _failure(checks.check_generation_flops, with_lengths(0, -1), TINY, 1_000, 3, 4,
                                              use_cache)
        assert "attends over itself too" in _failure(checks.check_generation_flops, without_own_key, TINY, 1_000, 2,
                                                     2, use_cache)


# ---------------------------------------------------------------------------------------------
# fastest
# ---------------------------------------------------------------------------------------------


def test_reference_fastest_passes(reference):
    checks.check_fastest(reference["fastest"], [0.030, 0.008, 0.020], 3)
    checks.check_fastest(reference["fastest"], [0.01], 1)
    checks.check_fastest(reference["fastest"], [0.01], 0)   # raises ValueError, as documented


def test_mean_slowest_total_and_milliseconds_are_each_rejected(reference):
    assert "mean" in _failure(checks.check_fastest, _demo("buggy-fastest-takes-mean")["fastest"],
                              [0.060, 0.010, 0.045], 3)

    def slowest(function, repeats):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
        return max(times)

    assert "slowest" in _failure(checks.check_fastest, slowest, [0.060, 0.010, 0.045], 3)

    def milliseconds(function, repeats):
        return reference["fastest"](function, repeats) * 1000

    assert "milliseconds" in _failure(checks.check_fastest, milliseconds, [0.02, 0.01], 2)

    def once(function, repeats):
        start = time.perf_counter()
        function()
        return time.perf_counter() - start

    assert "called the function 1 times" in _failure(checks.check_fastest, once, [0.02, 0.01], 2)

    def made_up(function, repeats):
        for _ in range(repeats):
            function()
        return 0.001

    assert "fastest call the check saw" in _failure(checks.check_fastest, made_up, [0.02, 0.03], 2)


def test_a_slow_grading_channel_does_not_fail_a_correct_fastest(reference):
    """When graded, every call the student times crosses processes; on a busy machine that adds
    tens of milliseconds. A single call (nothing wrong to tell apart) must still pass."""

    def fastest_over_a_slow_channel(function, repeats):
        def slowed():
            time.sleep(0.03)
            function()

        return reference["fastest"](slowed, repeats)

    checks.check_fastest(fastest_over_a_slow_channel, [0.02], 1)
    # Where the mean differs, the allowance stays below it: the mean is still caught.
    assert "mean" in _failure(checks.check_fastest, _demo("buggy-fastest-takes-mean")["fastest"],
                              [0.060, 0.010, 0.045], 3)


def test_no_repeats_must_raise_value_error(reference):
    def returns_infinity(function, repeats):
        return float("inf")

    assert "ValueError" in _failure(checks.check_fastest, returns_infinity, [0.01], 0)


def test_reference_fastest_is_the_course_measure():
    assert measure.fastest(lambda: time.sleep(0.002), 3) >= 0.002
    with pytest.raises(ValueError, match="repeats"):
        measure.fastest(lambda: None, 0)


# ---------------------------------------------------------------------------------------------
# time_step, on the tiny model (fast) and on SmolLM2 (slow)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("context_len, use_cache", [(1, True), (9, True), (9, False), (30, True)])
def test_reference_time_step_passes_on_the_tiny_model(reference, context_len, use_cache):
    checks.check_time_step(reference["time_step"], context_len, use_cache, repeats=2, model="tiny")


def test_a_decode_step_that_is_a_prefill_is_rejected():
    buggy = _demo("buggy-time-step-without-cache")
    message = _failure(checks.check_time_step, buggy["time_step"], 12, True, repeats=2, model="tiny")
    assert "other calls than the step to time" in message and "cache.next_positions(1)" in message
    checks.check_time_step(buggy["time_step"], 12, False, repeats=2, model="tiny")   # the uncached path is right


def test_reading_the_dtype_of_the_lent_model_gets_a_hint(reference):
    def copies_section_four(model, config, token_ids, use_cache, repeats=3):
        KVCache(config, len(token_ids) + repeats, dtype=model.dtype)
        return reference["time_step"](model, config, token_ids, use_cache, repeats)

    message = _failure(checks.check_time_step, copies_section_four, 8, True, repeats=2, model="tiny")
    assert "AttributeError" in message and "read what you need from config" in message


def test_a_made_up_time_without_the_model_is_rejected():
    def no_model_at_all(model, config, token_ids, use_cache, repeats=3):
        return 0.02

    assert "other calls than the step" in _failure(checks.check_time_step, no_model_at_all, 8, False, model="tiny")


def test_a_time_the_check_never_saw_is_rejected(reference):
    def too_fast(model, config, token_ids, use_cache, repeats=3):
        reference["time_step"](model, config, token_ids, use_cache, repeats)
        return 1e-9

    assert "the fastest of them" in _failure(checks.check_time_step, too_fast, 8, True, repeats=2, model="tiny")


@pytest.mark.slow
def test_reference_time_step_passes_on_smollm2(reference):
    checks.check_time_step(reference["time_step"], 16, False, repeats=2)
    checks.check_time_step(reference["time_step"], 16, True, repeats=2)


# ---------------------------------------------------------------------------------------------
# fit_step_time
# ---------------------------------------------------------------------------------------------


def test_reference_fit_passes_and_matches_numpy(reference):
    lengths, seconds = [512, 8, 256, 64], [0.41, 0.02, 0.19, 0.06]
    checks.check_fit_step_time(reference["fit_step_time"], lengths, seconds)
    slope, intercept = np.polyfit(lengths, seconds, 1)
    assert np.allclose(measure.fit_step_time(lengths, seconds), (intercept, slope))
    checks.check_fit_step_time(reference["fit_step_time"], [5, 5], [1.0, 1.0])        # must raise ValueError
    checks.check_fit_step_time(reference["fit_step_time"], [1, 2, 3], [1.0, 2.0])     # must raise ValueError


def test_swapped_fit_and_missing_value_error_are_rejected(reference):
    def swapped(context_lens, seconds):
        fixed, per_token = reference["fit_step_time"](context_lens, seconds)
        return per_token, fixed

    assert "intercept first" in _failure(checks.check_fit_step_time, swapped, [1, 2, 3], [3.0, 5.0, 7.0])

    def divides_by_zero(context_lens, seconds):
        mean_x = sum(context_lens) / len(context_lens)
        variance = sum((x - mean_x) ** 2 for x in context_lens)
        return 0.0, 1.0 / variance

    assert "ZeroDivisionError" in _failure(checks.check_fit_step_time, divides_by_zero, [5, 5], [1.0, 1.0])

    def through_the_origin(context_lens, seconds):
        return 0.0, sum(seconds) / sum(context_lens)

    assert "wrong fixed" in _failure(checks.check_fit_step_time, through_the_origin, [1, 2, 3], [2.0, 3.0, 4.0])


# ---------------------------------------------------------------------------------------------
# The notebook and its demo students
# ---------------------------------------------------------------------------------------------


def test_reexporting_the_reference_earns_nothing():
    assert "reference" in _failure(checks.check_fastest, measure.fastest, [0.01], 1)
    assert "reference" in _failure(checks.check_fit_step_time, measure.fit_step_time, [1, 2], [1.0, 2.0])


@pytest.mark.parametrize("name", sorted(_demo_specs()))
def test_demo_specs_name_real_answer_cells(name):
    spec = _demo_specs()[name]
    assert spec["BASE"] == "solution"
    assert set(spec["ANSWERS"]) <= set(_answer_sources())
    assert f"expected {spec['EXPECTED'][NOTEBOOK]:g}/11" in spec["DESCRIPTION"]


def test_header_announces_the_points():
    notebook = nbformat.read(SOLUTION, as_version=4)
    cells = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade") and cell.cell_type == "code"]
    points = sum(cell.metadata["nbgrader"]["points"] for cell in cells)
    assert points_summary(notebook) in notebook.cells[0].source   # its written answer's points too
    assert f"{points:g} in {len(cells)} graded test cells" in notebook.cells[0].source
    assert math.isclose(points, 11)
