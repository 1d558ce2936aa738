"""Demo student: perplexity scores token t with row t of the logits instead of row t - 1."""

DESCRIPTION = (
    "perplexity takes log p(token t) from row t of the logits, the row that predicts token t + 1: "
    "the model is asked how likely each token is given itself. Loses both perplexity cells, expected 5/9"
)
BASE = "solution"
ANSWERS = {
    "perplexity": '''
def perplexity(model, token_ids, window=256):
    """exp(mean negative log-likelihood) of token_ids under model, scored window by window."""
    total_nll, num_predicted = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(token_ids), window):
            chunk = token_ids[start : start + window]
            if len(chunk) < 2:
                continue
            input_ids = torch.tensor(chunk)
            log_probs = torch.log_softmax(model(input_ids).float(), dim=-1)
            predicted = log_probs[torch.arange(len(chunk)), input_ids]
            total_nll -= float(predicted.sum())
            num_predicted += len(chunk)
    return math.exp(total_nll / num_predicted)
''',
}
EXPECTED = {"02_quantized_smollm2": 5}
