"""Demo student: the KV cache of a model without GQA, counting the keys only."""

DESCRIPTION = (
    "kv_cache_bytes_mha counts one key of hidden_size numbers per token and layer but forgets the values (the "
    "factor 2): every size comes out half the right one, and it never raises for a negative length. Both "
    "kv_cache_bytes_mha cells fail, the visible one with a hint that says to count the values as well as the "
    "keys: expected 15/17"
)
BASE = "solution"
ANSWERS = {
    "kv_cache_bytes_mha": '''
def kv_cache_bytes_mha(num_layers, hidden_size, num_tokens, bytes_per_element):
    """Bytes of the KV cache of num_tokens tokens for a model with full multi-head attention."""
    return num_layers * hidden_size * num_tokens * bytes_per_element
''',
}
EXPECTED = {"03_decode": 15}
