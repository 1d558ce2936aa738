"""Demo student: store ignores padding (04_split_kv)."""

DESCRIPTION = (
    'store_kv_kernel stores every token, including those with slot -1 (padding): -1 // 16 is 0 and -1 % '
    "16 is -1 in Triton's C-style integer division, so it writes one slot before the start of the cache, "
    "which the interpreter's guard reports. Loses both store_kv cells, expected 14/18"
)
BASE = "solution"
ANSWERS = {
    '04_split_kv/store_kv': '''
@triton.jit
def store_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_k_token, stride_k_head,
                    stride_v_token, stride_v_head, stride_cache_block, stride_cache_token, stride_cache_head,
                    NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr):
    """Program token: copy k[token] and v[token] ([NUM_KV_HEADS, HEAD_DIM]) into slot slot_mapping[token]."""
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token)
    if True:
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
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size)
    return k_cache, v_cache
''',
}
EXPECTED = {'04_split_kv': 14}
