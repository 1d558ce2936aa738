"""Demo student: counts the output layer even when it is the (tied) embedding table."""

DESCRIPTION = (
    "count_parameters adds vocab_size x hidden_size for the lm_head whatever tied_embeddings says, so tied "
    "models (SmolLM2) count their table twice; tensor_shapes is right: loses test_count_parameters_smollm2 and "
    "test_count_parameters_hidden (3 points), expected 9/12"
)
BASE = "solution"
ANSWERS = {
    "count_parameters": '''
def count_parameters(config, tied_embeddings):
    """Number of weights of a Llama-style model."""
    total = 0
    for name, shape in tensor_shapes(config, tied_embeddings).items():
        if name != "lm_head":
            total += math.prod(shape)
    output_layer = config.vocab_size * config.hidden_size
    return total + output_layer
''',
}
EXPECTED = {"02_training_vs_inference": 9}
