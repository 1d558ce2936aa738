"""The chapter-2 checks (course_lib.checks.attention) accept the reference answers of
solutions/lab02-prefill-vs-decode/02_prefill.ipynb and reject typical bugs, including each demo
student's, with feedback that names the mistake.

The answers are taken from the solution notebook's answer cells and run with exec in a fresh
namespace (the notebook itself is not run), so these tests stay fast.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import attention as checks
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / "02_prefill.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    namespace = {"__name__": "__main__", "math": math, "torch": torch}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo_answers(name: str) -> dict[str, str]:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


def _replace_in_answer(grade_id: str, old: str, new: str) -> dict:
    source = _answer_sources()[grade_id]
    assert old in source, f"{old!r} not in the reference answer {grade_id}"
    return _student({grade_id: source.replace(old, new)})


@pytest.fixture(scope="module")
def reference():
    return _student()


SHAPES = [(6, 6, 2, 2, 8), (3, 10, 4, 2, 16), (1, 37, 9, 3, 64), (5, 23, 6, 3, 7), (17, 17, 8, 1, 33)]


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_attention_passes(reference, shape):
    checks.check_naive_attention(reference["naive_attention"], *shape)
    checks.check_flash_attention(reference["flash_attention"], *shape, block_q=4, block_k=7)


def test_reference_passes_scale_memory_and_costs(reference):
    checks.check_naive_attention(reference["naive_attention"], 12, 40, 6, 2, 16, scale=0.3)
    checks.check_flash_attention(reference["flash_attention"], 24, 60, 6, 3, 16, block_q=5, block_k=13, scale=0.2)
    checks.check_flash_attention_memory(reference["flash_attention"], 256, block=32)
    checks.check_linear_cost(reference["linear_cost"], 512, 576, 1536, 2)
    checks.check_attention_cost(reference["attention_cost"], 7, 19, 8, 2, 5, 0.5, True)


def test_sdpa_reference_agrees_with_course_attention():
    from course_lib.attention import naive_attention

    q, k, v = checks.random_qkv(5, 11, 6, 2, 8, seed=3)
    torch.testing.assert_close(checks.sdpa_reference(q, k, v), naive_attention(q, k, v), rtol=1e-4, atol=1e-5)


def test_demo_top_left_mask_is_named():
    student = _student(_demo_answers("buggy-top-left-mask"))
    checks.check_naive_attention(student["naive_attention"], 6, 6, 2, 2, 8)  # right when q_len == kv_len
    with pytest.raises(CheckFailed, match="aligned top-left"):
        checks.check_naive_attention(student["naive_attention"], 3, 10, 4, 2, 16)


def test_demo_no_rescale_is_named():
    student = _student(_demo_answers("buggy-no-rescale"))
    checks.check_flash_attention(student["flash_attention"], 8, 8, 2, 2, 4, block_q=8, block_k=8)  # one tile
    with pytest.raises(CheckFailed, match="AND the accumulator"):
        checks.check_flash_attention(student["flash_attention"], 8, 8, 2, 2, 4, block_q=4, block_k=4)


def test_missing_scale_is_named():
    student = _replace_in_answer("naive_attention", ") * scale", ")")
    with pytest.raises(CheckFailed, match=r"1 / sqrt\(head_dim\)"):
        checks.check_naive_attention(student["naive_attention"], 6, 6, 2, 2, 8)


def test_tiled_heads_instead_of_groups_is_named():
    student = _student({"naive_attention": _answer_sources()["naive_attention"]
                        .replace("k.repeat_interleave(group_size, dim=1)", "k.repeat(1, group_size, 1)")
                        .replace("v.repeat_interleave(group_size, dim=1)", "v.repeat(1, group_size, 1)")})
    with pytest.raises(CheckFailed, match="repeat_interleave"):
        checks.check_naive_attention(student["naive_attention"], 6, 6, 9, 3, 8)


def test_mask_that_hides_the_own_key_is_named():
    student = _replace_in_answer("naive_attention", "key_positions[None, :] <= query_positions",
                                 "key_positions[None, :] < query_positions")
    with pytest.raises(CheckFailed, match="its own key"):
        checks.check_naive_attention(student["naive_attention"], 3, 10, 4, 2, 16)
    # A full prefill: query 0 then sees no key at all and comes out NaN; the hint is still the mask's.
    with pytest.raises(CheckFailed, match="only query 0 came out NaN.*its own key") as caught:
        checks.check_naive_attention(student["naive_attention"], 6, 6, 2, 2, 8)
    assert "subtract the row maximum" not in str(caught.value)
    tiled = _replace_in_answer("flash_attention", "torch.arange(k_start, k_end)[None, :] <= query_positions",
                               "torch.arange(k_start, k_end)[None, :] < query_positions")
    with pytest.raises(CheckFailed, match="only query 0 came out NaN"):
        checks.check_flash_attention(tiled["flash_attention"], 8, 8, 2, 2, 4, block_q=4, block_k=4)


def test_full_size_mask_in_the_tiled_version_fails_the_memory_check():
    source = _answer_sources()["flash_attention"].replace(
        "    output = torch.empty_like(queries)\n",
        "    output = torch.empty_like(queries)\n"
        "    full_mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril(offset)\n",
    )
    student = _student({"flash_attention": source})
    checks.check_flash_attention(student["flash_attention"], 8, 8, 2, 2, 4, block_q=4, block_k=4)
    with pytest.raises(CheckFailed, match="full 128 x 128 score matrix"):
        checks.check_flash_attention_memory(student["flash_attention"], 128, block=16)


def test_naive_version_fails_the_memory_check(reference):
    def tiled_in_name_only(q, k, v, block_q=64, block_k=64, scale=None):
        return reference["naive_attention"](q, k, v, scale)

    with pytest.raises(CheckFailed, match="score matrix"):
        checks.check_flash_attention_memory(tiled_in_name_only, 128, block=16)


def test_largest_tensor_during_counts_created_tensors():
    _, largest, description = checks.largest_tensor_during(lambda: torch.zeros(3, 50) @ torch.zeros(50, 2))
    assert largest == 150
    assert "zeros" in description


def test_calling_torch_sdpa_earns_nothing():
    def naive_attention(q, k, v, scale=None):
        output = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=scale, enable_gqa=True)
        return output.transpose(0, 1)

    with pytest.raises(CheckFailed, match="scaled_dot_product_attention"):
        checks.check_naive_attention(naive_attention, 6, 6, 2, 2, 8)


def test_reexporting_the_reference_earns_nothing():
    from course_lib.attention import flash_attention

    with pytest.raises(CheckFailed, match="reference"):
        checks.check_flash_attention(flash_attention, 8, 8, 2, 2, 4, block_q=4, block_k=4)


def test_crash_becomes_feedback_naming_the_call():
    def naive_attention(q, k, v, scale=None):
        return q @ k  # wrong shapes for matmul

    with pytest.raises(CheckFailed, match=r"naive_attention\(q \[6, 2, 8\].*raised RuntimeError"):
        checks.check_naive_attention(naive_attention, 6, 6, 2, 2, 8)


def test_wrong_costs_are_named(reference):
    def linear_cost(num_tokens, in_features, out_features, bytes_per_element):
        return 2 * num_tokens * in_features * out_features, in_features * out_features * bytes_per_element

    with pytest.raises(CheckFailed, match="wrong number of bytes"):
        checks.check_linear_cost(linear_cost, 512, 576, 1536, 2)
    student = _replace_in_answer("attention_cost", "elements += 4 *", "elements += 2 *")
    checks.check_attention_cost(student["attention_cost"], 7, 19, 8, 2, 5, 0.5, False)
    with pytest.raises(CheckFailed, match="4 passes"):
        checks.check_attention_cost(student["attention_cost"], 7, 19, 8, 2, 5, 0.5, True)


# ---------------------------------------------------------------------------------------------
# Tiling: the result must depend on block_k (the keys are processed tile by tile)
# ---------------------------------------------------------------------------------------------


def test_a_softmax_over_whole_rows_fails_every_flash_check():
    """A plain softmax per block of queries ignores block_k; before, it passed all three flash cells."""
    student = _student(_demo_answers("buggy-flash-ignores-block-k"))
    for check, args, kwargs in [
        (checks.check_flash_attention, (8, 8, 2, 2, 4), {"block_q": 4, "block_k": 4}),
        (checks.check_flash_attention, (1, 53, 9, 3, 64), {"block_q": 64, "block_k": 7, "seed": 1}),
        (checks.check_flash_attention_memory, (128,), {"block": 16}),
    ]:
        with pytest.raises(CheckFailed, match="does not depend on block_k"):
            check(student["flash_attention"], *args, **kwargs)


def test_the_block_k_fingerprint_holds_for_the_reference_on_many_shapes(reference):
    """A tiled online softmax differs in its last bits from a single tile: the check relies on it."""
    for q_len, kv_len, heads, kv_heads, head_dim, block_q, block_k in [
        (8, 8, 2, 2, 4, 4, 4), (5, 70, 4, 2, 16, 2, 8), (33, 33, 6, 2, 5, 1, 1), (2, 9, 1, 1, 2, 2, 3),
    ]:
        checks.check_flash_attention(reference["flash_attention"], q_len, kv_len, heads, kv_heads, head_dim,
                                     block_q=block_q, block_k=block_k)


def test_one_key_tile_is_not_held_against_the_student(reference):
    """With block_k >= kv_len there is one tile either way: nothing to tell apart, nothing required."""
    student = _student(_demo_answers("buggy-flash-ignores-block-k"))
    checks.check_flash_attention(student["flash_attention"], 40, 40, 4, 4, 8, block_q=64, block_k=64)


def test_naive_attention_that_ignores_scale_fails_the_visible_scale_case_with_a_hint():
    buggy = _student(_demo_answers("buggy-naive-ignores-scale"))
    checks.check_naive_attention(buggy["naive_attention"], 3, 10, 4, 2, 16)   # scale None: right
    with pytest.raises(CheckFailed) as failure:
        checks.check_naive_attention(buggy["naive_attention"], 5, 8, 4, 2, 16, seed=7, scale=0.5)
    assert "use the scale argument when it is given" in str(failure.value)
