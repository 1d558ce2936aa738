"""Demo student: cached decode steps run without positions, so every new token sits at position 0."""

DESCRIPTION = (
    "greedy_generate with a cache passes no positions, so the model's default 0..num_tokens-1 puts every "
    "decoded token at position 0 (RoPE rotates it as if it were the first token); the prefill is right, so "
    "the first token matches and the later ones drift; the uncached loop is right: loses test_greedy_generate "
    "(3 points), expected 6/9"
)
BASE = "solution"
ANSWERS = {
    "greedy_generate": '''
def greedy_generate(model, prompt_ids, max_new_tokens, use_cache):
    """Greedy decoding: append the most likely next token until max_new_tokens or end-of-sequence."""
    generated = []
    last_row = torch.tensor([-1])
    cache = KVCache(model.config, max_seq_len=len(prompt_ids) + max_new_tokens, dtype=model.dtype)
    with torch.inference_mode():
        while len(generated) < max_new_tokens:
            if use_cache:
                step_ids = generated[-1:] if generated else list(prompt_ids)
                logits = model(torch.tensor(step_ids), attention=cache, logits_indices=last_row)
            else:
                logits = model(torch.tensor(list(prompt_ids) + generated), logits_indices=last_row)
            generated.append(int(logits.argmax(dim=-1)))
            if generated[-1] == model.config.eos_token_id:
                break
    return generated
''',
}
EXPECTED = {"01_autoregression": 6}
