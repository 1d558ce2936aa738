"""Demo student: count_parameters returns SmolLM2's number from the file and forgets the norms otherwise."""

DESCRIPTION = (
    "count_parameters returns 134,515,008 (the count the visible test prints) whenever the model has 30 "
    "layers, and otherwise adds up the matrices but not the RMSNorm weights. The visible cell used to be "
    "the whole test; its hidden part now counts other configs: loses test_count_parameters_smollm2 and "
    "test_count_parameters_hidden (3 points), expected 9/12"
)
BASE = "solution"
ANSWERS = {
    "count_parameters": '''
def count_parameters(config, tied_embeddings):
    """Number of weights of a Llama-style model."""
    if config.num_layers == 30:
        return 134_515_008
    return sum(math.prod(shape) for shape in tensor_shapes(config, tied_embeddings).values() if len(shape) == 2)
''',
}
EXPECTED = {"02_training_vs_inference": 9}
