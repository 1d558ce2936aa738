"""Demo student: kv_cache_bytes multiplies whatever it is given, negative lengths included."""

DESCRIPTION = (
    "kv_cache_bytes has no argument check, so seq_len=-1 gives a negative number of bytes instead of the "
    "ValueError its docstring promises. The visible tests now pass a negative length and a negative batch size: "
    "loses test_kv_cache_bytes (1 point), expected 9/10"
)
BASE = "solution"
ANSWERS = {
    "kv_cache_bytes": '''
def kv_cache_bytes(config, seq_len, batch_size=1, dtype=torch.float16):
    """Bytes of keys and values for `batch_size` sequences of `seq_len` tokens each."""
    return kv_cache_bytes_per_token(config, dtype) * seq_len * batch_size
''',
}
EXPECTED = {"03_kv_cache": 9}
