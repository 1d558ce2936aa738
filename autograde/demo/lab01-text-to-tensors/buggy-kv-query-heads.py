"""Demo student: the KV cache sized with the query heads."""

DESCRIPTION = (
    "inference_memory sizes the KV cache with num_q_heads instead of num_kv_heads: right for Llama-2 (as many "
    "KV heads as query heads), three times too big for SmolLM2 (9 query, 3 KV heads). The visible tests used only "
    "Llama-2-13B; they now include SmolLM2, with a hint that names grouped-query attention: loses "
    "test_inference_memory (3 points), expected 9/12"
)
BASE = "solution"
ANSWERS = {
    "inference_memory": '''
def inference_memory(num_parameters, precision, config, batch_size, seq_len, kv_precision="fp16"):
    """Bytes serving keeps: the weights and the KV cache."""
    per_token = 2 * config.num_layers * config.num_q_heads * config.head_dim * BYTES_PER_ELEMENT[kv_precision]
    return {
        "weights": num_parameters * BYTES_PER_ELEMENT[precision],
        "kv_cache": per_token * seq_len * batch_size,
    }
''',
}
EXPECTED = {"02_training_vs_inference": 9}
