"""Demo student: the cache attends over the stored tokens first and appends the new one afterwards."""

DESCRIPTION = (
    "DecodeCache.attend runs decode attention over the tokens stored so far and only then appends the "
    "new key and value, so a new token never sees itself (the prompt path, which attends over the "
    "new tokens directly, is right). Loses the cache cells and the generate cells, expected 8/17"
)
BASE = "solution"
ANSWERS = {
    "DecodeCache": '''
class DecodeCache:
    """A contiguous per-sequence KV cache that the model calls (an AttentionContext)."""

    def __init__(self, num_layers, max_seq_len, num_kv_heads, head_dim):
        shape = (max_seq_len, num_kv_heads, head_dim)
        self.keys = [torch.zeros(shape) for _ in range(num_layers)]
        self.values = [torch.zeros(shape) for _ in range(num_layers)]
        self.lengths = [0] * num_layers

    @property
    def seq_len(self):
        return self.lengths[-1]

    def attend(self, layer_index, q, k, v):
        start = self.lengths[layer_index]
        end = start + k.shape[0]
        if q.shape[0] == 1:
            output = decode_attention(q[0], self.keys[layer_index][:start], self.values[layer_index][:start])
            output = output.unsqueeze(0)
        else:
            output = prompt_attention(q, k, v)
        self.keys[layer_index][start:end] = k
        self.values[layer_index][start:end] = v
        self.lengths[layer_index] = end
        return output
''',
}
EXPECTED = {"03_decode": 8}
