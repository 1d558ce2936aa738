"""Demo student: training_memory treats every precision that is not fp32 as mixed precision."""

DESCRIPTION = (
    "training_memory handles fp32 and otherwise assumes mixed precision, so int8 or a typo such as 'FP32' "
    "gets a training budget instead of the documented ValueError (int8 and int4 are inference formats): "
    "loses test_training_memory (2 points), expected 10/12"
)
BASE = "solution"
ANSWERS = {
    "training_memory": '''
def training_memory(num_parameters, precision, activations):
    """Bytes a training step with Adam keeps, by component."""
    if precision == "fp32":
        weight_bytes, gradient_bytes, optimizer_bytes = 4, 4, 8
    else:
        weight_bytes, gradient_bytes, optimizer_bytes = 2, 2, 12
    return {
        "weights": num_parameters * weight_bytes,
        "gradients": num_parameters * gradient_bytes,
        "optimizer": num_parameters * optimizer_bytes,
        "activations": activations,
    }
''',
}
EXPECTED = {"02_training_vs_inference": 10}
