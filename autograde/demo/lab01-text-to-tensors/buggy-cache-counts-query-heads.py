"""Demo student: the KV cache counts the query heads instead of the KV heads."""

DESCRIPTION = (
    'kv_cache_bytes_per_token multiplies by num_q_heads (ignores grouped-query attention): loses the per-token, '
    'batch and real-allocation cells (SmolLM2 has 9 query but 3 KV heads), keeps the token-count and waste '
    'cells: expected 5/10'
)
BASE = "solution"
ANSWERS = {
    'kv_cache_bytes_per_token': '''
def kv_cache_bytes_per_token(config, dtype):
    """Bytes of keys and values that one token takes in the cache, over all layers.

    Args:
        config: the model's sizes (num_layers, num_q_heads, num_kv_heads, head_dim, ...).
        dtype: torch.dtype the cache stores (torch.float16, torch.float32, ...).
    Returns:
        int: 2 x num_layers x num_kv_heads x head_dim x bytes per element.
    """
    bytes_per_element = torch.empty((), dtype=dtype).element_size()
    # A key and a value per KV head: query heads that share a KV head add nothing (GQA).
    return 2 * config.num_layers * config.num_q_heads * config.head_dim * bytes_per_element

''',
}
EXPECTED = {'03_kv_cache': 5}
