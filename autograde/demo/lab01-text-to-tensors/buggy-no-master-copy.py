"""Demo student: mixed-precision Adam without the fp32 master copy of the weights."""

DESCRIPTION = (
    "training_memory gives the optimizer 8 bytes per parameter in every precision (Adam's two fp32 moments) "
    "and forgets the fp32 master weights that mixed precision keeps: loses test_training_memory (2 points), "
    "expected 10/12"
)
BASE = "solution"
ANSWERS = {
    "training_memory": '''
def training_memory(num_parameters, precision, activations):
    """Bytes a training step with Adam keeps, by component."""
    weight_bytes = 4 if precision == "fp32" else 2
    return {
        "weights": num_parameters * weight_bytes,
        "gradients": num_parameters * weight_bytes,
        "optimizer": num_parameters * 8,
        "activations": activations,
    }
''',
}
EXPECTED = {"02_training_vs_inference": 10}
