"""Demo student: time_step with use_cache=True fills a cache but times a pass over the whole context."""

DESCRIPTION = (
    "time_step fills a KVCache as asked, then times model(all n tokens) again (without the cache) for both "
    "settings, so the 'decode step' it reports is a prefill: the with-cache curve would grow with n like the "
    "other. The check records, on its side, which forward calls ran and how many tokens each: loses both "
    "time_step cells (4 points), expected 7/11"
)
BASE = "solution"
ANSWERS = {
    "time_step": '''
def time_step(model, config, token_ids, use_cache, repeats=3):
    """Seconds of the step that produces the token after `token_ids` (the fastest of `repeats`)."""
    last_row = torch.tensor([-1])
    context = torch.tensor(token_ids)
    with torch.inference_mode():
        if use_cache:
            cache = KVCache(config, max_seq_len=len(token_ids) + repeats)
            if len(token_ids) > 1:
                model(context[:-1], cache.next_positions(len(token_ids) - 1), cache, logits_indices=last_row)
        return fastest(lambda: model(context, None, None, logits_indices=last_row), repeats)
''',
}
EXPECTED = {"01_autoregression": 7}
