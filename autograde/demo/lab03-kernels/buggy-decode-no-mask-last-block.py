"""Demo student: decode no mask last block (03_paged_decode)."""

DESCRIPTION = (
    'paged_decode_kernel loads K and V of the last block without masking the positions past seq_len and '
    'never sets their scores to -inf: the NaN the checks put in unused slots reaches the output. Loses '
    'the three kernel cells, expected 4/14'
)
BASE = "solution"
ANSWERS = {
    '03_paged_decode/paged_decode_attention': '''
@triton.jit
def paged_decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                        stride_q_seq, stride_q_head, stride_out_seq, stride_out_head,
                        stride_cache_block, stride_cache_token, stride_cache_head, stride_table_seq,
                        GROUP_SIZE: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                        BLOCK_SIZE: tl.constexpr):
    """Program (seq, kv_head): the GROUP_SIZE query heads of kv_head's group over the sequence's cache."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)

    rows = tl.arange(0, GROUP_PAD)
    is_head = rows < GROUP_SIZE
    heads = kv_head * GROUP_SIZE + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :],
                mask=is_head[:, None], other=0.0).to(tl.float32)                      # [GROUP_PAD, HEAD_DIM]

    running_max = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    offsets = tl.arange(0, BLOCK_SIZE)
    for block_index in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_tables_ptr + seq * stride_table_seq + block_index).to(tl.int64)
        is_token = block_index * BLOCK_SIZE + offsets < seq_len                           # [BLOCK_SIZE]
        slots = (block * stride_cache_block + offsets[:, None] * stride_cache_token
                 + kv_head * stride_cache_head + dims[None, :])                           # [BLOCK_SIZE, HEAD_DIM]
        k = tl.load(k_cache_ptr + slots).to(tl.float32)
        v = tl.load(v_cache_ptr + slots).to(tl.float32)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale                  # [GROUP_PAD, BLOCK_SIZE]
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        rescale = tl.exp(running_max - new_max)
        probs = tl.exp(scores - new_max[:, None])
        running_sum = running_sum * rescale + tl.sum(probs, axis=1)
        acc = acc * rescale[:, None] + tl.sum(probs[:, :, None] * v[None, :, :], axis=1)
        running_max = new_max
    out = acc / running_sum[:, None]
    tl.store(out_ptr + seq * stride_out_seq + heads[:, None] * stride_out_head + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=is_head[:, None])


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale):
    """Decode attention over a paged KV cache with paged_decode_kernel.

    Args:
        q: Tensor [num_seqs, num_q_heads, head_dim] (float32 or float16; rows may be strided, the last
            dimension is contiguous), the newest token's query of each sequence.
        k_cache, v_cache: Tensor [num_blocks, block_size, num_kv_heads, head_dim], same dtype, shape and
            strides; block_size and head_dim are powers of two.
        block_tables: int32 Tensor [num_seqs, max_blocks]; entries past a sequence's last block are never read.
        seq_lens: int32 Tensor [num_seqs], tokens cached per sequence (the newest included), each >= 1.
        scale: float, multiplies q . k before the softmax.
    Returns:
        A new Tensor [num_seqs, num_q_heads, head_dim] of q's dtype; query head h reads KV head
        h // (num_q_heads // num_kv_heads).
    """
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group_size = num_q_heads // num_kv_heads
    out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    paged_decode_kernel[(num_seqs, num_kv_heads)](
        out, q, k_cache, v_cache, block_tables, seq_lens, scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        GROUP_SIZE=group_size, GROUP_PAD=triton.next_power_of_2(group_size), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size)
    return out
''',
}
EXPECTED = {'03_paged_decode': 4}
