"""Demo student: top-k keeps the k indices torch.topk returns, so a tie at the k-th place loses tokens."""

DESCRIPTION = (
    "top_k_filter keeps exactly the k indices that torch.topk returns, so when tokens tie with the k-th largest "
    "logit it keeps one of them and drops the others (the docstring keeps them all). The visible tests now include "
    "a tie at the k-th place, with a hint that names it: loses test_temperature_top_k (2 points). Chapter 4 handed "
    "in as the reference (chapter 5 imports its BlockAllocator): full marks there; expected 17/19"
)
BASE = "solution"
ANSWERS = {
    "temperature_top_k": '''
def apply_temperature(logits, temperature):
    """Logits divided by the temperature."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (0 means greedy), got {temperature}")
    return logits / temperature


def top_k_filter(logits, top_k):
    """Keep the top_k largest logits of each row; every other entry becomes -inf."""
    vocab_size = logits.shape[-1]
    if top_k <= 0 or top_k >= vocab_size:
        return logits.clone()
    kept = torch.topk(logits, top_k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, kept, True)
    return logits.masked_fill(~keep, float("-inf"))
''',
}
EXPECTED = {"04_paging": 11, "05_pipeline": 17}
