"""Demo student: chapter 4's kernels assume contiguous inputs (04_split_kv, 05_into_the_engine)."""

DESCRIPTION = (
    'split_kv_decode_attention and store_kv compute the row strides of q, k and v from their shapes '
    'instead of passing q.stride(0), k.stride(0), v.stride(0): right for contiguous tensors, wrong for '
    'the strided views the engine passes. Chapter 5 imports these kernels from chapter 4 (answers_from), '
    'so both chapters lose: the split and store cells of chapter 4, expected 9/18, and both KernelBackend '
    'cells of chapter 5, expected 4/10'
)
BASE = "solution"
ANSWERS = {
    '04_split_kv/split_kv_decode_attention': '''
@triton.jit
def split_kv_kernel(split_out_ptr, split_lse_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                    scale, stride_q_seq, stride_q_head, stride_cache_block, stride_cache_token, stride_cache_head,
                    stride_table_seq, NUM_SPLITS: tl.constexpr, GROUP_SIZE: tl.constexpr, GROUP_PAD: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Program (seq, kv_head, split): the group's queries over the split's range of blocks -> (o_s, lse_s)."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_q_heads = tl.num_programs(1) * GROUP_SIZE
    seq_len = tl.load(seq_lens_ptr + seq)
    num_blocks = tl.cdiv(seq_len, BLOCK_SIZE)
    per_split = tl.cdiv(num_blocks, NUM_SPLITS)
    first = split * per_split
    last = tl.minimum(first + per_split, num_blocks)

    rows = tl.arange(0, GROUP_PAD)
    is_head = rows < GROUP_SIZE
    heads = kv_head * GROUP_SIZE + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :],
                mask=is_head[:, None], other=0.0).to(tl.float32)

    running_max = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    offsets = tl.arange(0, BLOCK_SIZE)
    for block_index in range(first, last):
        block = tl.load(block_tables_ptr + seq * stride_table_seq + block_index).to(tl.int64)
        is_token = block_index * BLOCK_SIZE + offsets < seq_len
        slots = (block * stride_cache_block + offsets[:, None] * stride_cache_token
                 + kv_head * stride_cache_head + dims[None, :])
        k = tl.load(k_cache_ptr + slots, mask=is_token[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + slots, mask=is_token[:, None], other=0.0).to(tl.float32)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        scores = tl.where(is_token[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        rescale = tl.exp(running_max - new_max)
        probs = tl.exp(scores - new_max[:, None])
        running_sum = running_sum * rescale + tl.sum(probs, axis=1)
        acc = acc * rescale[:, None] + tl.sum(probs[:, :, None] * v[None, :, :], axis=1)
        running_max = new_max

    has_tokens = running_sum > 0                       # False for an empty range
    safe_sum = tl.where(has_tokens, running_sum, 1.0)
    lse = tl.where(has_tokens, running_max + tl.log(safe_sum), float("-inf"))
    split_rows = (seq * num_q_heads + heads) * NUM_SPLITS + split
    tl.store(split_lse_ptr + split_rows, lse, mask=is_head)
    tl.store(split_out_ptr + split_rows[:, None] * HEAD_DIM + dims[None, :], acc / safe_sum[:, None],
             mask=is_head[:, None])


def split_kv_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits):
    """paged_decode_attention with each sequence's blocks split over num_splits programs, then merged.

    Args:
        q, k_cache, v_cache, block_tables, seq_lens, scale: as in chapter 3's paged_decode_attention.
        num_splits: int >= 1, programs per (sequence, KV head).
    Returns:
        A new Tensor [num_seqs, num_q_heads, head_dim] of q's dtype.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group_size = num_q_heads // num_kv_heads
    split_out = torch.empty((num_seqs, num_q_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
    split_lse = torch.empty((num_seqs, num_q_heads, num_splits), dtype=torch.float32, device=q.device)
    split_kv_kernel[(num_seqs, num_kv_heads, num_splits)](
        split_out, split_lse, q, k_cache, v_cache, block_tables, seq_lens, scale,
        num_q_heads * head_dim, head_dim, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        NUM_SPLITS=num_splits, GROUP_SIZE=group_size, GROUP_PAD=triton.next_power_of_2(group_size),
        HEAD_DIM=head_dim, BLOCK_SIZE=block_size)
    if num_splits == 1:
        return split_out[:, :, 0].to(q.dtype)   # one split: its normalized output is the answer, no merge needed
    return merge_splits(split_out, split_lse).to(q.dtype)
''',
    '04_split_kv/store_kv': '''
@triton.jit
def store_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_k_token, stride_k_head,
                    stride_v_token, stride_v_head, stride_cache_block, stride_cache_token, stride_cache_head,
                    NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr):
    """Program token: copy k[token] and v[token] ([NUM_KV_HEADS, HEAD_DIM]) into slot slot_mapping[token]."""
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token)
    if slot >= 0:
        block = slot // BLOCK_SIZE
        offset = slot % BLOCK_SIZE
        heads = tl.arange(0, HEADS_PAD)
        dims = tl.arange(0, HEAD_DIM)
        is_head = heads[:, None] < NUM_KV_HEADS
        k = tl.load(k_ptr + token * stride_k_token + heads[:, None] * stride_k_head + dims[None, :], mask=is_head)
        v = tl.load(v_ptr + token * stride_v_token + heads[:, None] * stride_v_head + dims[None, :], mask=is_head)
        destination = (block * stride_cache_block + offset * stride_cache_token
                       + heads[:, None] * stride_cache_head + dims[None, :])
        tl.store(k_cache_ptr + destination, k, mask=is_head)
        tl.store(v_cache_ptr + destination, v, mask=is_head)


def store_kv(k, v, k_cache, v_cache, slot_mapping):
    """Write each token's key and value into its slot of the paged pool, in place.

    Args:
        k, v: Tensor [num_tokens, num_kv_heads, head_dim] (possibly strided views, last dim contiguous),
            the caches' dtype.
        k_cache, v_cache: Tensor [num_blocks, block_size, num_kv_heads, head_dim], same shape and strides.
        slot_mapping: int64 Tensor [num_tokens]; token i goes to block slot // block_size, offset
            slot % block_size; -1 means "do not store".
    Returns:
        (k_cache, v_cache), the tensors passed in, written in place.
    """
    num_tokens = k.shape[0]
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    store_kv_kernel[(num_tokens,)](
        k, v, k_cache, v_cache, slot_mapping, num_kv_heads * head_dim, head_dim, num_kv_heads * head_dim, head_dim,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size)
    return k_cache, v_cache
''',
}
EXPECTED = {'04_split_kv': 9, '05_into_the_engine': 4}
