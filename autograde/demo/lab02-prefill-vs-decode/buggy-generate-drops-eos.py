"""Demo student: generate stops at the end-of-sequence token but leaves it out of the result."""

DESCRIPTION = (
    "generate checks each new token for config.eos_token_id before appending it, so it stops at the right "
    "step but returns the tokens without the eos id (the docstring includes it). The check used to fail it on "
    "the count of forward calls, with no word about eos; its message now says the tokens stop right before the "
    "end-of-sequence token: loses both generate cells, expected 12/17"
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
        while True:
            logits = model(input_ids, positions, cache, logits_indices=last_row)
            token = int(logits[0].argmax())
            if token == config.eos_token_id:
                return generated
            generated.append(token)
            if len(generated) == max_new_tokens:
                return generated
            input_ids = torch.tensor(generated[-1:])
            positions = torch.tensor([cache.seq_len])
''',
}
EXPECTED = {"03_decode": 12}
