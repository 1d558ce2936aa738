"""Demo student: counts a pass for the last generated token too (off by one)."""

DESCRIPTION = (
    "tokens_processed runs one pass too many: with a cache P + T tokens (the last token fed back although no "
    "pass follows), without one T*P + T*(T+1)/2 (pass k runs P + k tokens): loses test_tokens_processed_visible "
    "and test_tokens_processed_hidden (3 points), expected 6/9"
)
BASE = "solution"
ANSWERS = {
    "tokens_processed": '''
def tokens_processed(prompt_len, new_tokens, use_cache):
    """Tokens run through the model to generate `new_tokens` tokens after a prompt."""
    if use_cache:
        return prompt_len + new_tokens
    return sum(prompt_len + k for k in range(1, new_tokens + 1))
''',
}
EXPECTED = {"01_autoregression": 6}
