"""Demo student: merge without max (04_split_kv)."""

DESCRIPTION = (
    'merge_splits_kernel weighs each split by exp(lse) instead of exp(lse - max lse): mathematically the '
    "same, but exp overflows float32 once a split's log-sum-exp passes 88 (large scores). The split "
    "kernel's checks still pass (their scores are moderate). Loses both merge_splits cells, expected "
    '14/18'
)
BASE = "solution"
ANSWERS = {
    '04_split_kv/merge_splits': '''
@triton.jit
def merge_splits_kernel(out_ptr, split_out_ptr, split_lse_ptr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
                        HEAD_DIM: tl.constexpr):
    """Row tl.program_id(0) (= seq * num_q_heads + head): out[row] = sum_s w_s o_s / sum_s w_s."""
    row = tl.program_id(0)
    splits = tl.arange(0, SPLITS_PAD)
    is_split = splits < NUM_SPLITS
    dims = tl.arange(0, HEAD_DIM)
    lse = tl.load(split_lse_ptr + row * NUM_SPLITS + splits, mask=is_split, other=float("-inf"))
    outputs = tl.load(split_out_ptr + (row * NUM_SPLITS + splits)[:, None] * HEAD_DIM + dims[None, :],
                      mask=is_split[:, None], other=0.0)                          # [SPLITS_PAD, HEAD_DIM]
    weights = tl.exp(lse)
    result = tl.sum(outputs * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(out_ptr + row * HEAD_DIM + dims, result)


def merge_splits(split_out, split_lse):
    """Combine split-KV partial results.

    Args:
        split_out: contiguous float32 Tensor [num_seqs, num_q_heads, num_splits, head_dim], each split's
            output normalized by its own softmax sum (0 for an empty split).
        split_lse: contiguous float32 Tensor [num_seqs, num_q_heads, num_splits], each split's log-sum-exp
            of its scores (-inf for an empty split).
    Returns:
        A new float32 Tensor [num_seqs, num_q_heads, head_dim].
    """
    num_seqs, num_q_heads, num_splits, head_dim = split_out.shape
    out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=torch.float32, device=split_out.device)
    merge_splits_kernel[(num_seqs * num_q_heads,)](out, split_out, split_lse, NUM_SPLITS=num_splits,
                                                   SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim)
    return out
''',
}
EXPECTED = {'04_split_kv': 14}
