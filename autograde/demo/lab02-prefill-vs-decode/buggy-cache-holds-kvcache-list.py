"""Demo student: DecodeCache keeps one of the course's KVCache objects per layer, in a list."""

DESCRIPTION = (
    "DecodeCache wraps the course's KVCache (one single-layer KVCache per layer, kept in a list) instead of "
    "storing keys and values itself. The old check looked for a KVCache only among the object's direct "
    "attributes, so a list of them slipped through; it now looks inside lists and dicts too: loses both "
    "DecodeCache cells (4 points); generate, run on this cache, still gives the right tokens: expected 13/17"
)
BASE = "solution"
ANSWERS = {
    "DecodeCache": '''
from course_lib.kv_cache import KVCache
from course_lib.model import ModelConfig


class DecodeCache:
    """A per-layer list of single-layer KVCache objects."""

    def __init__(self, num_layers, max_seq_len, num_kv_heads, head_dim):
        layer_config = ModelConfig(num_layers=1, hidden_size=num_kv_heads * head_dim, num_q_heads=num_kv_heads,
                                   num_kv_heads=num_kv_heads, head_dim=head_dim, vocab_size=2, intermediate_size=2,
                                   max_position_embeddings=max(max_seq_len, 1), rope_theta=10000.0,
                                   rms_norm_eps=1e-5)
        self.layers = [KVCache(layer_config, max_seq_len) for _ in range(num_layers)]

    @property
    def seq_len(self):
        return self.layers[-1].seq_len

    def attend(self, layer_index, q, k, v):
        return self.layers[layer_index].attend(0, q, k, v)
''',
}
EXPECTED = {"03_decode": 13}
