"""Split-KV pieces of the reference (course_lib.kernels.paged_attention): merge_splits against torch's
logsumexp, the split kernel's partial results against attention over each split's own range, and
decode_attention_traffic on a hand-checked example."""

from __future__ import annotations

import pytest
import torch

import course_lib.kernels  # noqa: F401
from course_lib.kernels import paged_attention as pa
from course_lib.kernels.paged_attention import decode_attention_traffic, merge_splits, paged_decode_attention_ref
from course_lib.kernels.tolerances import assert_close


def _merge_torch(split_out, split_lse):
    weights = torch.softmax(split_lse.double(), dim=-1)
    return torch.einsum("shp,shpd->shd", weights, split_out.double())


@pytest.mark.parametrize("lse_range", [(-3.0, 3.0), (-150.0, 150.0), (400.0, 410.0)])
def test_merge_splits_matches_torch_without_overflow(lse_range):
    generator = torch.Generator().manual_seed(0)
    split_out = torch.randn(2, 3, 5, 16, generator=generator)
    low, high = lse_range
    split_lse = low + (high - low) * torch.rand(2, 3, 5, generator=generator)
    split_lse[0, :, 3:] = float("-inf")     # empty splits weigh nothing
    split_out[0, :, 3:] = 0.0
    got = merge_splits(split_out, split_lse)
    assert_close(got, _merge_torch(split_out, split_lse))


def test_merge_of_rows_with_only_empty_splits_is_zero():
    split_out = torch.zeros(1, 2, 3, 8)
    split_lse = torch.full((1, 2, 3), float("-inf"))
    assert torch.equal(merge_splits(split_out, split_lse), torch.zeros(1, 2, 8))


def test_merge_splits_rejects_bad_input():
    with pytest.raises(ValueError, match="4-D"):
        merge_splits(torch.zeros(2, 3, 8), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="split_lse must have shape"):
        merge_splits(torch.zeros(2, 3, 4, 8), torch.zeros(2, 3, 5))
    with pytest.raises(TypeError, match="float32"):
        merge_splits(torch.zeros(2, 3, 4, 8, dtype=torch.float16), torch.zeros(2, 3, 4))


def test_split_partials_are_attention_over_each_range(monkeypatch):
    """With 2 splits, each split's (output, lse) must be attention over its half of the blocks."""
    captured = {}
    original = pa.merge_splits

    def capture(split_out, split_lse, *, out=None):
        captured["out"], captured["lse"] = split_out.clone(), split_lse.clone()
        return original(split_out, split_lse, out=out)

    monkeypatch.setattr(pa, "merge_splits", capture)
    generator = torch.Generator().manual_seed(3)
    k_cache = torch.randn(10, 16, 1, 16, generator=generator)
    v_cache = torch.randn(10, 16, 1, 16, generator=generator)
    q = torch.randn(1, 2, 16, generator=generator)
    tables = torch.tensor([[4, 7, 1, 9]], dtype=torch.int32)
    lens = torch.tensor([104], dtype=torch.int32)   # two of the kernel's 64-position tiles: one per split
    out = pa.paged_decode_attention(q, k_cache, v_cache, tables, lens, 0.25, num_splits=2)
    torch.testing.assert_close(out, paged_decode_attention_ref(q, k_cache, v_cache, tables, lens, 0.25),
                               atol=1e-5, rtol=1e-5)
    keys = k_cache[tables[0].long()].flatten(0, 1)[:104, 0]
    values = v_cache[tables[0].long()].flatten(0, 1)[:104, 0]
    for split, positions in enumerate((slice(0, 64), slice(64, 104))):
        scores = q[0] @ keys[positions].T * 0.25                  # [2 heads, tokens]
        torch.testing.assert_close(captured["lse"][0, :, split], torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(captured["out"][0, :, split], torch.softmax(scores, -1) @ values[positions],
                                   atol=1e-5, rtol=1e-5)


def test_decode_attention_traffic_by_hand():
    # 2 sequences of 10 and 4 tokens, blocks of 4, 9 query / 3 KV heads of 64, bf16
    paged, padded = decode_attention_traffic([10, 4], 4, 9, 3, 64, 2)
    assert paged == (2 * 14 * 3 * 64 + 2 * 2 * 9 * 64) * 2
    assert padded == (6 * 2 * 12 * 3 * 64 + 2 * 2 * 9 * 64) * 2
    with pytest.raises(ValueError, match="seq_lens"):
        decode_attention_traffic([], 4, 9, 3, 64, 2)
