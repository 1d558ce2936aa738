"""Demo student: generate runs max_new_tokens steps even after the end-of-sequence token."""

DESCRIPTION = (
    "generate stops only after max_new_tokens tokens, never at config.eos_token_id: a chat answer that ends "
    "after 8 tokens runs on past its end. The visible chat prompt (\"What is the capital of France?\") shows "
    "it, with a hint that names the end-of-sequence token: loses both generate cells, expected 12/17"
)
BASE = "solution"
ANSWERS = {
    "generate": '''
def generate(model, config, prompt_ids, max_new_tokens):
    """Greedy decoding of one prompt through the model with a DecodeCache."""
    cache = DecodeCache(config.num_layers, len(prompt_ids) + max_new_tokens, config.num_kv_heads, config.head_dim)
    last_row = torch.tensor([-1])
    input_ids = torch.tensor(prompt_ids)
    positions = torch.arange(len(prompt_ids))
    generated = []
    with torch.inference_mode():
        while len(generated) < max_new_tokens:
            logits = model(input_ids, positions, cache, logits_indices=last_row)
            generated.append(int(logits[0].argmax()))
            input_ids = torch.tensor(generated[-1:])
            positions = torch.tensor([cache.seq_len])
    return generated
''',
}
EXPECTED = {"03_decode": 12}
