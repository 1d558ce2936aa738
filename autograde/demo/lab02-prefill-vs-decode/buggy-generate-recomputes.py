"""Demo student: generate runs the whole sequence again at every step, through a fresh cache."""

DESCRIPTION = (
    "generate builds a new DecodeCache at every step and runs the prompt plus every token generated so far "
    "through the model: the tokens are right (the cache is filled and used within the step), but the work "
    "is the quadratic recomputation a KV cache exists to avoid. The old check saw only the tokens and passed "
    "it; the check now counts, on its side, the positions every forward call ran: loses both generate cells "
    "(5 points), expected 12/17"
)
BASE = "solution"
ANSWERS = {
    "generate": '''
def generate(model, config, prompt_ids, max_new_tokens):
    """Greedy decoding of one prompt through the model with a DecodeCache."""
    last_row = torch.tensor([-1])
    sequence = list(prompt_ids)
    generated = []
    with torch.inference_mode():
        while True:
            cache = DecodeCache(config.num_layers, len(sequence), config.num_kv_heads, config.head_dim)
            logits = model(torch.tensor(sequence), torch.arange(len(sequence)), cache, logits_indices=last_row)
            generated.append(int(logits[0].argmax()))
            sequence.append(generated[-1])
            if generated[-1] == config.eos_token_id or len(generated) == max_new_tokens:
                return generated
''',
}
EXPECTED = {"03_decode": 12}
