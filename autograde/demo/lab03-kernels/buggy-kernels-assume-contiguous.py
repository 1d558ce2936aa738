"""Demo student: kernels assume contiguous (05_into_the_engine)."""

DESCRIPTION = (
    'the pasted kernels compute the row strides of q, k and v from their shapes (num_heads * head_dim) '
    'instead of passing q.stride(0), k.stride(0), v.stride(0): right for contiguous tensors, wrong for '
    'the strided views the engine passes. Loses the kernels and KernelBackend cells, expected 4/13'
)
BASE = "solution"
ANSWERS = {
    '05_into_the_engine/kernels': '''
# Paste your chapter 4 kernels and functions here.
@triton.jit
def merge_splits_kernel(out_ptr, split_out_ptr, split_lse_ptr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
                        HEAD_DIM: tl.constexpr):
    row = tl.program_id(0)
    splits = tl.arange(0, SPLITS_PAD)
    is_split = splits < NUM_SPLITS
    dims = tl.arange(0, HEAD_DIM)
    lse = tl.load(split_lse_ptr + row * NUM_SPLITS + splits, mask=is_split, other=float("-inf"))
    outputs = tl.load(split_out_ptr + (row * NUM_SPLITS + splits)[:, None] * HEAD_DIM + dims[None, :],
                      mask=is_split[:, None], other=0.0)
    weights = tl.exp(lse - tl.max(lse, axis=0))
    result = tl.sum(outputs * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(out_ptr + row * HEAD_DIM + dims, result)


def merge_splits(split_out, split_lse):
    num_seqs, num_q_heads, num_splits, head_dim = split_out.shape
    out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=torch.float32, device=split_out.device)
    merge_splits_kernel[(num_seqs * num_q_heads,)](out, split_out, split_lse, NUM_SPLITS=num_splits,
                                                   SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim)
    return out


@triton.jit
def split_kv_kernel(split_out_ptr, split_lse_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                    scale, stride_q_seq, stride_q_head, stride_cache_block, stride_cache_token, stride_cache_head,
                    stride_table_seq, NUM_SPLITS: tl.constexpr, GROUP_SIZE: tl.constexpr, GROUP_PAD: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
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

    has_tokens = running_sum > 0
    safe_sum = tl.where(has_tokens, running_sum, 1.0)
    lse = tl.where(has_tokens, running_max + tl.log(safe_sum), float("-inf"))
    split_rows = (seq * num_q_heads + heads) * NUM_SPLITS + split
    tl.store(split_lse_ptr + split_rows, lse, mask=is_head)
    tl.store(split_out_ptr + split_rows[:, None] * HEAD_DIM + dims[None, :], acc / safe_sum[:, None],
             mask=is_head[:, None])


def split_kv_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits):
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group_size = num_q_heads // num_kv_heads
    split_out = torch.empty((num_seqs, num_q_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
    split_lse = torch.empty((num_seqs, num_q_heads, num_splits), dtype=torch.float32, device=q.device)
    split_kv_kernel[(num_seqs, num_kv_heads, num_splits)](
        split_out, split_lse, q, k_cache, v_cache, block_tables, seq_lens, scale,
        num_q_heads * head_dim, head_dim, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), NUM_SPLITS=num_splits, GROUP_SIZE=group_size, GROUP_PAD=triton.next_power_of_2(group_size),
        HEAD_DIM=head_dim, BLOCK_SIZE=block_size)
    if num_splits == 1:
        return split_out[:, :, 0].to(q.dtype)   # one split: its normalized output is the answer, no merge needed
    return merge_splits(split_out, split_lse).to(q.dtype)


PROGRAMS_PER_SM = 4
MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 32


def choose_num_splits(num_seqs, num_kv_heads, max_context_len, num_sms):
    programs = num_seqs * num_kv_heads
    wanted = -(-PROGRAMS_PER_SM * num_sms // programs)
    useful = max_context_len // MIN_TOKENS_PER_SPLIT
    return max(1, min(wanted, useful, MAX_SPLITS))


@triton.jit
def store_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_k_token, stride_k_head,
                    stride_v_token, stride_v_head, stride_cache_block, stride_cache_token, stride_cache_head,
                    NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr):
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
EXPECTED = {'05_into_the_engine': 4}
