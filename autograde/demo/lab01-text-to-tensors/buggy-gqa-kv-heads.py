"""Demo student: k_proj and v_proj get num_q_heads heads (grouped-query attention forgotten)."""

DESCRIPTION = (
    "tensor_shapes sizes k_proj and v_proj with num_q_heads instead of num_kv_heads, so SmolLM2's count is "
    "too large; count_parameters sums those shapes and is wrong for every GQA model: loses test_tensor_shapes, "
    "test_count_parameters_smollm2 and test_count_parameters_hidden (5 points), expected 7/12"
)
BASE = "solution"
ANSWERS = {
    "tensor_shapes": '''
def tensor_shapes(config, tied_embeddings):
    """Every weight tensor of a Llama-style model, with its shape."""
    hidden = config.hidden_size
    head_width = config.num_q_heads * config.head_dim
    shapes = {"embed_tokens": (config.vocab_size, hidden)}
    for layer in range(config.num_layers):
        prefix = f"layers.{layer}."
        shapes[prefix + "input_norm"] = (hidden,)
        shapes[prefix + "q_proj"] = (head_width, hidden)
        shapes[prefix + "k_proj"] = (head_width, hidden)
        shapes[prefix + "v_proj"] = (head_width, hidden)
        shapes[prefix + "o_proj"] = (hidden, head_width)
        shapes[prefix + "post_attention_norm"] = (hidden,)
        shapes[prefix + "gate_proj"] = (config.intermediate_size, hidden)
        shapes[prefix + "up_proj"] = (config.intermediate_size, hidden)
        shapes[prefix + "down_proj"] = (hidden, config.intermediate_size)
    shapes["norm"] = (hidden,)
    if not tied_embeddings:
        shapes["lm_head"] = (config.vocab_size, hidden)
    return shapes
''',
}
EXPECTED = {"02_training_vs_inference": 7}
