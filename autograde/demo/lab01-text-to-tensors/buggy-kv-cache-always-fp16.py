"""Demo student: the KV cache at 2 bytes a number whatever kv_precision says."""

DESCRIPTION = (
    "inference_memory counts the KV cache at 2 bytes a number (fp16) and ignores kv_precision: right for every "
    "fp16 or bf16 cache, wrong for an int8 or fp32 one. The visible tests now include an int8 cache, with a hint "
    "that names kv_precision: loses test_inference_memory (3 points), expected 9/12"
)
BASE = "solution"
ANSWERS = {
    "inference_memory": '''
def inference_memory(num_parameters, precision, config, batch_size, seq_len, kv_precision="fp16"):
    """Bytes serving keeps: the weights and the KV cache."""
    kv_bytes_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2
    return {
        "weights": num_parameters * BYTES_PER_ELEMENT[precision],
        "kv_cache": kv_bytes_per_token * seq_len * batch_size,
    }
''',
}
EXPECTED = {"02_training_vs_inference": 9}
