"""Demo student: every decode step runs the new token at position 0."""

DESCRIPTION = (
    "generate passes positions = arange(len(input_ids)) on every forward call, so each new token is "
    "rotated by RoPE as if it were the first token of the sequence; the cache is right but the tokens "
    "drift from the reference after a few steps. The check sees the positions of every forward call and names "
    "them. Loses both generate cells, expected 12/17"
)
BASE = "solution"
ANSWERS = {
    "generate": '''
def generate(model, config, prompt_ids, max_new_tokens):
    """Greedy decoding of one prompt through the model with a DecodeCache."""
    cache = DecodeCache(config.num_layers, len(prompt_ids) + max_new_tokens, config.num_kv_heads, config.head_dim)
    input_ids = torch.tensor(prompt_ids)
    generated = []
    with torch.inference_mode():
        while True:
            positions = torch.arange(len(input_ids))
            logits = model(input_ids, positions, cache, logits_indices=torch.tensor([-1]))
            generated.append(int(logits[0].argmax()))
            if generated[-1] == config.eos_token_id or len(generated) == max_new_tokens:
                return generated
            input_ids = torch.tensor(generated[-1:])
''',
}
EXPECTED = {"03_decode": 12}
