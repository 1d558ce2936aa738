"""The chapter 3-4 checks of Lab 0.3 (course_lib.checks.kernels_paged) accept the reference answers of
solutions/lab03-kernels/03_paged_decode.ipynb and 04_split_kv.ipynb, and reject each demo student's
bug (and other classic ones) with a hint that names it.

Also checked here: the pools the checks build look the way the module docstring says (shuffled,
shared, NaN where no token lives), and the float64 expectation agrees with the course's torch
reference and with torch SDPA.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.checks import kernels_paged as checks
from course_lib.kernels.paged_attention import paged_decode_attention_ref
from tests.kernel_notebooks import fails as _fails, demo_answers, replace_in_answer, student

DECODE = "03_paged_decode"
SPLIT = "04_split_kv"


@pytest.fixture(scope="module")
def decode():
    return student(DECODE)


@pytest.fixture(scope="module")
def split():
    return student(SPLIT)


def _demo(name: str, notebook: str, grade_id: str) -> dict:
    return student(notebook, {grade_id: demo_answers(name)[f"{notebook}/{grade_id}"]})


# ---------------------------------------------------------------------------------------------
# The pools and the expectation
# ---------------------------------------------------------------------------------------------


def test_paged_case_is_shuffled_shared_and_poisoned():
    case = checks.paged_case([40, 33, 5], 4, 2, 8, 16, seed=3, table_padding="invalid")
    lengths, tables = case.seq_lens.tolist(), case.block_tables
    used = [tables[seq, : -(-lengths[seq] // 16)].tolist() for seq in range(3)]
    assert used[0][:2] == used[1][:2], "the two longest sequences share their common full blocks"
    assert len(set(sum(used, []))) == sum(len(blocks) for blocks in used) - 2, "only the shared blocks repeat"
    assert (tables[2, 1:] >= case.k_cache.shape[0]).all(), "padding entries lie outside the pool"
    holds = torch.zeros(case.k_cache.shape[:2], dtype=torch.bool)
    for seq in range(3):
        for position in range(lengths[seq]):
            holds[used[seq][position // 16], position % 16] = True
    assert torch.isnan(case.k_cache[~holds]).all() and torch.isnan(case.v_cache[~holds]).all()
    assert torch.isfinite(case.k_cache[holds]).all()


def test_float64_expectation_matches_the_reference_and_sdpa():
    case = checks.paged_case([17, 40, 1], 6, 2, 16, 8, seed=1)
    expected = checks.paged_attention_float64(*case.args())
    reference = paged_decode_attention_ref(*case.args())
    torch.testing.assert_close(expected.float(), reference, atol=1e-5, rtol=1e-5)
    # one sequence by SDPA on contiguous keys (query head h -> KV head h // 3)
    table, length = case.block_tables[1], 40
    keys = case.k_cache[table[:5].long()].flatten(0, 1)[:length].repeat_interleave(3, dim=1).transpose(0, 1)
    values = case.v_cache[table[:5].long()].flatten(0, 1)[:length].repeat_interleave(3, dim=1).transpose(0, 1)
    sdpa = F.scaled_dot_product_attention(case.q[1][:, None], keys, values, scale=case.scale)[:, 0]
    torch.testing.assert_close(expected[1].float(), sdpa, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Chapter 3
# ---------------------------------------------------------------------------------------------


def test_reference_answers_pass_chapter_3(decode):
    attention = decode["paged_decode_attention"]
    checks.check_paged_decode_attention(attention, [5, 16, 33], 4, 2, 16, 16)
    checks.check_paged_decode_attention(attention, [1, 15, 16, 17, 100], 9, 3, 64, 16, seed=1,
                                        table_padding="invalid")
    checks.check_paged_decode_attention(attention, [30, 3], 8, 1, 16, 4, seed=2)
    checks.check_paged_decode_attention(attention, [20, 45], 9, 3, 64, 16, seed=3, strided_q=True)
    checks.check_paged_decode_attention(attention, [33], 4, 2, 32, 16, seed=4, dtype=torch.float16, q_scale=3.0)
    traffic = decode["decode_attention_traffic"]
    for args in (([10, 4], 4, 9, 3, 64, 2), ([1], 16, 1, 1, 1, 4), ([16, 2000, 35], 16, 9, 3, 64, 2)):
        checks.check_decode_attention_traffic(traffic, *args)


def test_missing_mask_on_the_last_block_is_named():
    bad = _demo("buggy-decode-no-mask-last-block", DECODE, "paged_decode_attention")
    checks.check_paged_decode_attention(bad["paged_decode_attention"], [16, 32], 4, 2, 16, 16)  # whole blocks only
    _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [5, 16, 33], 4, 2, 16, 16,
           words=("NaN", "end inside a block", "-inf"))


def test_no_rescale_is_named():
    bad = _demo("buggy-decode-no-rescale", DECODE, "paged_decode_attention")
    _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [5, 16, 33, 60], 4, 2, 16, 16,
           words=("fit in one block are right", "running sum"))


def test_wrong_gqa_group_is_named():
    bad = _demo("buggy-decode-gqa-modulo", DECODE, "paged_decode_attention")
    checks.check_paged_decode_attention(bad["paged_decode_attention"], [5, 33], 4, 4, 16, 16)  # groups of one
    _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [5, 16, 33], 4, 2, 16, 16,
           words=("h % 2", "h // 2"))


def test_floor_of_the_block_count_is_named():
    bad = _demo("buggy-decode-floor-blocks", DECODE, "paged_decode_attention")
    checks.check_paged_decode_attention(bad["paged_decode_attention"], [16, 32], 4, 2, 16, 16)
    _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [17, 40, 32], 4, 2, 16, 16,
           words=("end inside a block", "cdiv"))


def test_ignoring_q_strides_is_named():
    bad = _demo("buggy-decode-ignores-q-stride", DECODE, "paged_decode_attention")
    checks.check_paged_decode_attention(bad["paged_decode_attention"], [20, 45], 9, 3, 64, 16)
    # the visible case of the chapter's test cell
    _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [20, 45], 9, 3, 64, 16,
           strided_q=True, words=("strided view", "q.stride(0)"))


def test_masked_loads_without_a_minus_inf_score_are_named_before_the_loop():
    bad = replace_in_answer(DECODE, "paged_decode_attention",
                            "        scores = tl.where(is_token[None, :], scores, float(\"-inf\"))\n", "")
    message = _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [5, 16, 33], 4, 2, 16, 16,
                     words=("end inside a block", "score of 0", "-inf"))
    assert "cdiv" not in message, message


def test_a_count_in_elements_is_told_times_bytes_per_element():
    bad = replace_in_answer(DECODE, "decode_attention_traffic",
                            "return paged * bytes_per_element, padded * bytes_per_element", "return paged, padded")
    _fails(checks.check_decode_attention_traffic, bad["decode_attention_traffic"], [10, 4], 4, 9, 3, 64, 2,
           words=("in elements", "times bytes per element"))


def test_a_kernel_that_walks_the_whole_table_row_hits_the_guard():
    bad = replace_in_answer(DECODE, "paged_decode_attention",
                            "for block_index in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):",
                            "for block_index in range(0, stride_table_seq + 1):")
    _fails(checks.check_paged_decode_attention, bad["paged_decode_attention"], [5, 20], 4, 2, 16, 16,
           table_padding="invalid", words=("OutOfBoundsAccess",))


def test_traffic_counting_whole_blocks_is_named():
    bad = replace_in_answer(DECODE, "decode_attention_traffic", "paged = 2 * sum(seq_lens) * kv_row",
                            "paged = 2 * sum(-(-n // block_size) * block_size for n in seq_lens) * kv_row")
    _fails(checks.check_decode_attention_traffic, bad["decode_attention_traffic"], [10, 4], 4, 9, 3, 64, 2,
           words=("whole blocks",))


# ---------------------------------------------------------------------------------------------
# Chapter 4
# ---------------------------------------------------------------------------------------------


def test_reference_answers_pass_chapter_4(split):
    checks.check_merge_splits(split["merge_splits"], 2, 3, 4, 16)
    checks.check_merge_splits(split["merge_splits"], 3, 4, 7, 32, seed=1, lse_low=-150.0, lse_high=150.0)
    checks.check_merge_splits(split["merge_splits"], 2, 9, 1, 64, seed=2)
    attention = split["split_kv_decode_attention"]
    checks.check_split_kv_decode_attention(attention, [1, 17, 40], 9, 3, 64, 16, 3)
    checks.check_split_kv_decode_attention(attention, [100, 5], 4, 2, 16, 16, 1, seed=1)
    checks.check_split_kv_decode_attention(attention, [48, 80], 9, 3, 64, 16, 2, seed=2, strided_q=True,
                                           table_padding="invalid")
    checks.check_choose_num_splits(split["choose_num_splits"], [(1, 8, 8192, 132), (256, 8, 4096, 132),
                                                                (5, 2, 255, 8), (8, 8, 8192, 132), (1, 8, 100, 132)])
    checks.check_store_kv(split["store_kv"], 12, 3, 64, 16, 3)
    checks.check_store_kv(split["store_kv"], 40, 3, 64, 16, 5, seed=2, strided=True)
    checks.check_store_kv(split["store_kv"], 30, 8, 32, 8, 6, seed=3, dtype=torch.float16)


def test_merge_without_the_max_overflows_and_is_named():
    bad = _demo("buggy-merge-without-max", SPLIT, "merge_splits")
    checks.check_merge_splits(bad["merge_splits"], 2, 3, 4, 16)             # moderate log-sum-exps pass
    checks.check_split_kv_decode_attention(bad["split_kv_decode_attention"], [40, 100], 4, 2, 16, 16, 2)
    _fails(checks.check_merge_splits, bad["merge_splits"], 1, 2, 3, 64, lse_low=60.0, lse_high=120.0,
           empty_splits=False, words=("overflows", "Subtract the row's largest lse"))


def test_merge_as_a_plain_average_is_named():
    bad = replace_in_answer(SPLIT, "merge_splits", "weights = tl.exp(lse - tl.max(lse, axis=0))",
                            "weights = tl.where(lse > float('-inf'), 1.0, 0.0)")
    _fails(checks.check_merge_splits, bad["merge_splits"], 2, 3, 4, 16, empty_splits=False,
           words=("plain average",))


def test_split_ranges_that_skip_a_block_are_named():
    bad = replace_in_answer(SPLIT, "split_kv_decode_attention", "per_split = tl.cdiv(num_blocks, NUM_SPLITS)",
                            "per_split = tl.maximum(num_blocks // NUM_SPLITS, 1)")
    checks.check_split_kv_decode_attention(bad["split_kv_decode_attention"], [40, 100], 4, 2, 16, 16, 1)
    _fails(checks.check_split_kv_decode_attention, bad["split_kv_decode_attention"], [5, 40, 100], 4, 2, 16, 16, 2,
           words=("right with num_splits=1", "rounded down", "every block exactly once"))


def test_a_per_split_count_rounded_down_is_named_not_blamed_on_empty_splits():
    bad = replace_in_answer(SPLIT, "split_kv_decode_attention", "per_split = tl.cdiv(num_blocks, NUM_SPLITS)",
                            "per_split = num_blocks // NUM_SPLITS")
    # the visible case with empty splits: NaN for the short sequences, as with a missing empty-split guard
    message = _fails(checks.check_split_kv_decode_attention, bad["split_kv_decode_attention"], [1, 17, 40], 9, 3, 64,
                     16, 3, words=("rounded down", "cdiv(num_blocks, num_splits)"))
    assert "0 / 0" not in message, message


def test_empty_split_without_guard_gives_nan_and_is_named():
    bad = replace_in_answer(SPLIT, "split_kv_decode_attention", "safe_sum = tl.where(has_tokens, running_sum, 1.0)",
                            "safe_sum = running_sum")
    _fails(checks.check_split_kv_decode_attention, bad["split_kv_decode_attention"], [1, 17, 40], 9, 3, 64, 16, 3,
           words=("NaN with more splits", "lse -inf"))


def test_choose_num_splits_without_max_one_is_named():
    bad = _demo("buggy-splits-without-max-one", SPLIT, "choose_num_splits")
    checks.check_choose_num_splits(bad["choose_num_splits"], [(1, 8, 8192, 132), (64, 8, 4096, 132)])
    for case in ((256, 8, 4096, 132), (1, 8, 100, 132)):    # the visible cases of the chapter's test cell
        _fails(checks.check_choose_num_splits, bad["choose_num_splits"], [case], words=("0 splits", "max(1, ...)"))


def test_choose_num_splits_with_a_second_wave_is_caught():
    bad = replace_in_answer(SPLIT, "choose_num_splits", "wanted = PROGRAMS_PER_SM * num_sms // programs",
                            "wanted = -(-PROGRAMS_PER_SM * num_sms // programs)")
    _fails(checks.check_choose_num_splits, bad["choose_num_splits"], [(64, 8, 4096, 132)], words=("one wave",))


def test_choose_num_splits_without_the_token_floor_is_caught():
    bad = replace_in_answer(SPLIT, "choose_num_splits", "return max(1, min(wanted, useful, MAX_SPLITS))",
                            "return max(1, min(wanted, MAX_SPLITS))")
    _fails(checks.check_choose_num_splits, bad["choose_num_splits"], [(1, 8, 512, 132)], words=("useful",))


def test_store_that_ignores_padding_hits_the_guard():
    bad = _demo("buggy-store-ignores-padding", SPLIT, "store_kv")
    checks.check_store_kv(bad["store_kv"], 5, 2, 16, 4, 4, padding=False)
    _fails(checks.check_store_kv, bad["store_kv"], 12, 3, 64, 16, 3, words=("OutOfBoundsAccess", "slot -1", "do not store"))


def test_store_that_ignores_k_strides_is_named():
    bad = _demo("buggy-store-ignores-strides", SPLIT, "store_kv")
    checks.check_store_kv(bad["store_kv"], 12, 3, 64, 16, 3)
    # the visible case of the chapter's test cell
    _fails(checks.check_store_kv, bad["store_kv"], 12, 3, 64, 16, 3, strided=True, words=("strided views",))


def test_store_that_swaps_keys_and_values_is_named():
    bad = replace_in_answer(SPLIT, "store_kv", "store_kv_kernel[(num_tokens,)](\n        k, v,",
                            "store_kv_kernel[(num_tokens,)](\n        v, k,")
    _fails(checks.check_store_kv, bad["store_kv"], 5, 2, 16, 4, 4, padding=False, words=("swapped",))


def test_store_into_new_tensors_is_refused():
    bad = replace_in_answer(SPLIT, "store_kv", "    num_tokens = k.shape[0]\n",
                            "    num_tokens = k.shape[0]\n    k_cache, v_cache = k_cache.clone(), v_cache.clone()\n")
    _fails(checks.check_store_kv, bad["store_kv"], 5, 2, 16, 4, 4, padding=False, words=("in place",))


def test_merge_reference_matches_torch_logsumexp():
    from course_lib.kernels.paged_attention import merge_splits

    split_out, split_lse = checks._merge_inputs(2, 3, 5, 16, seed=0, lse_low=-120.0, lse_high=120.0,
                                                empty_splits=True)
    got = merge_splits(split_out, split_lse)
    weights = torch.exp(split_lse.double() - torch.logsumexp(split_lse.double(), dim=-1, keepdim=True))
    expected = (weights[..., None] * split_out.double()).sum(dim=2)
    torch.testing.assert_close(got.double(), expected, atol=1e-6, rtol=1e-5)
    assert not math.isnan(float(got.sum()))


def test_kernels_that_ignore_strides_are_told_about_views():
    answers = demo_answers("buggy-kernels-assume-contiguous")
    bad = student(SPLIT, {grade_id: answers[f"{SPLIT}/{grade_id}"] for grade_id in ("split_kv_decode_attention",
                                                                                   "store_kv")})
    _fails(checks.check_split_kv_decode_attention, bad["split_kv_decode_attention"], [9, 40], 9, 3, 64, 16, 2,
           strided_q=True, words=("contiguous q", "q.stride(0)", "Wrong: the sequences of lengths [40]"))
    _fails(checks.check_store_kv, bad["store_kv"], 12, 3, 64, 16, 3, strided=True, words=("strided views",))
