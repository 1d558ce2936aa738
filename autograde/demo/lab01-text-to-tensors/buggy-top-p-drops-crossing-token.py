"""Demo student: top-p keeps tokens while the running sum INCLUDING the token is <= top_p."""

DESCRIPTION = (
    'top_p_filter drops the token whose probability crosses top_p (cumsum > top_p instead of the mass before it), so it keeps one token too few and drops every token when top_p is below the largest probability: loses the top-p cell. Chapter 4 handed in as the reference (chapter 5 imports its BlockAllocator): full marks there; expected 17/19'
)
BASE = "solution"
ANSWERS = {
    "top_p": '''
def top_p_filter(logits, top_p):
    """Nucleus filter: keep the most likely tokens until their probability reaches top_p.

    Args:
        logits: float tensor [num_seqs, vocab] (not modified); -inf entries have probability 0.
        top_p: float in (0, 1]; 1 keeps every token.
    Returns:
        a new tensor [num_seqs, vocab]. In each row, with probabilities sorted in decreasing order,
        a token is kept when the probability of the tokens BEFORE it sums to less than top_p (so the
        token that crosses top_p is kept, and the most likely token always is); the rest become -inf.
    """
    if top_p >= 1:
        return logits.clone()  # no sum: rounding could drop tokens of tiny probability
    probs = torch.softmax(logits, dim=-1)
    sorted_probs, sorted_ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    cumulative = torch.cumsum(sorted_probs, dim=-1)
    drop_sorted = cumulative > top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_ids, drop_sorted)  # back to token order
    return logits.masked_fill(drop, float("-inf"))
''',
}
EXPECTED = {"04_paging": 11, "05_pipeline": 17}
