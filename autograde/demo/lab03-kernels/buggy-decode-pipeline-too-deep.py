"""Demo student: decode pipelined ten stages deep (03_paged_decode)."""

DESCRIPTION = (
    "paged_decode_kernel follows the chapter's tensor-core hint (tl.dot with the group padded to 16 rows, "
    'float32 products kept float32) and walks the cache in tiles of 8 blocks with a loop pipelined ten '
    'stages deep (tl.range(..., num_stages=10)) to hide memory latency. The interpreter runs the loop one '
    'step at a time and every check passes; on a GPU each stage keeps its K and V tiles in shared memory, '
    '276 KB per program for float32 blocks of 16, more than the 227 KB an H100 gives a block. Loses the '
    'compile cell only, expected 13/14'
)
BASE = "solution"
ANSWERS = {
    '03_paged_decode/paged_decode_attention': '''
BLOCKS_PER_STEP = tl.constexpr(8)   # 8 cache blocks per loop step: fewer, longer steps
ROWS = tl.constexpr(16)              # tl.dot needs at least 16 rows: the group padded to 16


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
    TILE: tl.constexpr = BLOCK_SIZE * BLOCKS_PER_STEP

    rows = tl.arange(0, ROWS)
    is_head = rows < GROUP_SIZE
    heads = kv_head * GROUP_SIZE + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :],
                mask=is_head[:, None], other=0.0).to(tl.float32)                      # [ROWS, HEAD_DIM]

    running_max = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    for start in tl.range(0, seq_len, TILE, num_stages=10):   # 10 loads in flight hide the memory latency
        positions = start + tl.arange(0, TILE)                                         # [TILE]
        is_token = positions < seq_len
        blocks = tl.load(block_tables_ptr + seq * stride_table_seq + positions // BLOCK_SIZE,
                         mask=is_token, other=0).to(tl.int64)
        slots = (blocks[:, None] * stride_cache_block + (positions % BLOCK_SIZE)[:, None] * stride_cache_token
                 + kv_head * stride_cache_head + dims[None, :])                        # [TILE, HEAD_DIM]
        k = tl.load(k_cache_ptr + slots, mask=is_token[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + slots, mask=is_token[:, None], other=0.0).to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale               # [ROWS, TILE]
        scores = tl.where(is_token[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        rescale = tl.exp(running_max - new_max)
        probs = tl.exp(scores - new_max[:, None])
        running_sum = running_sum * rescale + tl.sum(probs, axis=1)
        acc = acc * rescale[:, None] + tl.dot(probs, v, input_precision="ieee")
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
EXPECTED = {'03_paged_decode': 13}
