"""naive_attention, flash_attention and sdpa_attention against torch's scaled_dot_product_attention.

The oracle below builds its own bottom-right causal mask with ``torch.tril`` and repeats the kv
heads itself, so it shares no code with course_lib.attention.

Tolerances (fp32 inputs ~N(0, 1), head_dim <= 64): our implementations accumulate in fp32 in a
different order than torch's kernel, so results differ by rounding only: atol = rtol = 2e-5.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.attention import (
    UncachedAttention,
    causal_mask,
    flash_attention,
    naive_attention,
    sdpa_attention,
)

FP32_TOLERANCE = {"atol": 2e-5, "rtol": 2e-5}


def reference_attention(q, k, v, *, causal=True, scale=None):
    """torch SDPA with kv heads repeated and an explicit bottom-right mask (the outside oracle)."""
    q_len, num_q_heads, _ = q.shape
    kv_len, num_kv_heads, _ = k.shape
    group = num_q_heads // num_kv_heads
    keys = k.repeat_interleave(group, dim=1).transpose(0, 1)[None]
    values = v.repeat_interleave(group, dim=1).transpose(0, 1)[None]
    mask = None
    if causal:
        # Query i is token kv_len - q_len + i: it sees diagonal offset kv_len - q_len of the tril.
        mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril(diagonal=kv_len - q_len)
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=mask, scale=scale)
    return out[0].transpose(0, 1)


def random_qkv(q_len, kv_len, num_kv_heads, group, head_dim, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(q_len, num_kv_heads * group, head_dim, generator=generator, dtype=dtype)
    k = torch.randn(kv_len, num_kv_heads, head_dim, generator=generator, dtype=dtype)
    v = torch.randn(kv_len, num_kv_heads, head_dim, generator=generator, dtype=dtype)
    return q, k, v


def flash_small_blocks(q, k, v, **kwargs):
    return flash_attention(q, k, v, block_q=16, block_k=32, **kwargs)


IMPLEMENTATIONS = {
    "naive": naive_attention,
    "flash": flash_attention,
    "flash_small_blocks": flash_small_blocks,
    "sdpa": sdpa_attention,
}

# (q_len, kv_len): full prefill, decode, chunked prefill, lengths not multiples of the blocks.
NAMED_SHAPES = {
    "prefill": (64, 64),
    "prefill_odd": (37, 37),
    "decode": (1, 50),
    "decode_first_token": (1, 1),
    "chunk_after_cache": (20, 75),
    "chunk_odd": (33, 97),
    "long_prefill": (130, 130),
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", NAMED_SHAPES)
@pytest.mark.parametrize("group", [1, 3, 4])
def test_matches_sdpa_on_named_shapes(implementation, shape, group):
    q_len, kv_len = NAMED_SHAPES[shape]
    q, k, v = random_qkv(q_len, kv_len, num_kv_heads=2, group=group, head_dim=16)
    got = IMPLEMENTATIONS[implementation](q, k, v)
    assert got.shape == q.shape
    torch.testing.assert_close(got, reference_attention(q, k, v), **FP32_TOLERANCE)


@st.composite
def attention_cases(draw):
    """Random shapes and block sizes, at most 6 query blocks x 12 key blocks so the loop stays quick."""
    block_q = draw(st.integers(1, 32))
    block_k = draw(st.integers(1, 32))
    q_len = draw(st.integers(1, 6 * min(block_q, block_k)))
    kv_len = draw(st.integers(q_len, q_len + 6 * block_k))
    return {
        "q_len": q_len,
        "kv_len": kv_len,
        "num_kv_heads": draw(st.integers(1, 3)),
        "group": draw(st.sampled_from([1, 3, 4])),
        "head_dim": draw(st.sampled_from([8, 16, 64])),
        "block_q": block_q,
        "block_k": block_k,
        "causal": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=25, deadline=None)
@given(case=attention_cases())
def test_random_shapes_match_sdpa(case):
    q, k, v = random_qkv(
        case["q_len"], case["kv_len"], case["num_kv_heads"], case["group"], case["head_dim"], seed=case["seed"]
    )
    causal = case["causal"]
    expected = reference_attention(q, k, v, causal=causal)
    torch.testing.assert_close(naive_attention(q, k, v, causal=causal), expected, **FP32_TOLERANCE)
    torch.testing.assert_close(sdpa_attention(q, k, v, causal=causal), expected, **FP32_TOLERANCE)
    flash = flash_attention(q, k, v, causal=causal, block_q=case["block_q"], block_k=case["block_k"])
    torch.testing.assert_close(flash, expected, **FP32_TOLERANCE)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_custom_scale(implementation):
    q, k, v = random_qkv(9, 21, num_kv_heads=1, group=3, head_dim=8, seed=3)
    got = IMPLEMENTATIONS[implementation](q, k, v, scale=0.5)
    torch.testing.assert_close(got, reference_attention(q, k, v, scale=0.5), **FP32_TOLERANCE)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_bfloat16_keeps_dtype_and_is_close(implementation):
    # bf16 has an 8-bit mantissa (relative step 2^-8 ~ 4e-3); outputs are averages of values ~N(0, 1).
    q, k, v = random_qkv(12, 30, num_kv_heads=1, group=4, head_dim=16, seed=5, dtype=torch.bfloat16)
    got = IMPLEMENTATIONS[implementation](q, k, v)
    assert got.dtype == torch.bfloat16
    expected = reference_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=2e-2)


def test_decode_query_sees_every_key():
    # A single query is the last token: changing the very first key must change its output.
    q, k, v = random_qkv(1, 10, num_kv_heads=1, group=1, head_dim=8, seed=1)
    changed_v = v.clone()
    changed_v[0] += 10.0
    for attention in IMPLEMENTATIONS.values():
        assert not torch.allclose(attention(q, k, v), attention(q, k, changed_v))


def test_causal_mask_is_bottom_right_aligned():
    expected = torch.tensor(
        [
            [True, True, True, False],
            [True, True, True, True],
        ]
    )
    assert torch.equal(causal_mask(2, 4), expected)


class LargestTensorSeen(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operator produced."""

    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(tensor, torch.Tensor):
                self.max_numel = max(self.max_numel, tensor.numel())
        return result


def test_flash_never_builds_the_full_score_matrix():
    q_len = kv_len = 128
    num_heads, head_dim, block_q, block_k = 2, 8, 32, 16
    q, k, v = random_qkv(q_len, kv_len, num_kv_heads=num_heads, group=1, head_dim=head_dim)
    full_scores = num_heads * q_len * kv_len
    # The biggest legitimate tensors: a score tile, or q/k/v/output themselves.
    allowed = max(num_heads * block_q * block_k, num_heads * kv_len * head_dim)

    with LargestTensorSeen() as flash_seen:
        flash_attention(q, k, v, block_q=block_q, block_k=block_k)
    with LargestTensorSeen() as naive_seen:
        naive_attention(q, k, v)

    assert flash_seen.max_numel <= allowed < full_scores
    assert naive_seen.max_numel >= full_scores  # the check above would catch a full score matrix


def test_uncached_attention_is_causal_self_attention():
    q, k, v = random_qkv(17, 17, num_kv_heads=3, group=3, head_dim=16)
    context = UncachedAttention(naive_attention)
    torch.testing.assert_close(context.attend(0, q, k, v), reference_attention(q, k, v), **FP32_TOLERANCE)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize(
    ("q_shape", "kv_shape", "message"),
    [
        ((4, 2, 8), (4, 2), "3 dimensions"),
        ((4, 3, 8), (4, 2, 8), "multiple of num_kv_heads"),
        ((4, 2, 8), (4, 2, 16), "head_dim"),
        ((5, 2, 8), (4, 2, 8), r"q_len \(5\) must be <= kv_len \(4\)"),
        ((1, 2, 8), (0, 2, 8), "at least one token"),
    ],
)
def test_bad_shapes_raise_clear_errors(implementation, q_shape, kv_shape, message):
    q, k = torch.zeros(q_shape), torch.zeros(kv_shape)
    with pytest.raises(ValueError, match=message):
        IMPLEMENTATIONS[implementation](q, k, k.clone())


def test_k_and_v_must_match():
    with pytest.raises(ValueError, match="same shape"):
        naive_attention(torch.zeros(2, 2, 8), torch.zeros(3, 2, 8), torch.zeros(4, 2, 8))


def test_dtypes_must_match():
    with pytest.raises(TypeError, match="dtype"):
        sdpa_attention(torch.zeros(2, 2, 8), torch.zeros(3, 2, 8), torch.zeros(3, 2, 8, dtype=torch.float64))


@pytest.mark.parametrize("blocks", [{"block_q": 0}, {"block_k": -1}, {"block_q": 2.5}])
def test_flash_rejects_bad_block_sizes(blocks):
    q, k, v = random_qkv(4, 4, num_kv_heads=1, group=1, head_dim=8)
    with pytest.raises(ValueError, match="block_"):
        flash_attention(q, k, v, **blocks)


def test_non_causal_allows_more_queries_than_keys():
    q, k, v = random_qkv(7, 3, num_kv_heads=1, group=2, head_dim=8)
    expected = reference_attention(q, k, v, causal=False)
    for attention in IMPLEMENTATIONS.values():
        torch.testing.assert_close(attention(q, k, v, causal=False), expected, **FP32_TOLERANCE)
