"""Demo student: the int8 scales come from the columns (dim 0), not from the rows (output channels)."""

DESCRIPTION = (
    "quantize_int8 takes max |weight| over dim 0, one scale per input column, and dequantize_int8 "
    "multiplies by it column-wise: a consistent round trip, but not per output channel. Loses the "
    "two int8 symmetric cells, expected 11/15"
)
BASE = "solution"
ANSWERS = {
    "int8_symmetric": '''
def quantize_int8(weight):
    """Symmetric int8 quantization with one scale per output channel (row)."""
    weight = weight.float()
    scale = weight.abs().amax(dim=0) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    """q int8 [out_features, in_features], scale -> float32 weight."""
    return q.float() * scale.float()
''',
}
EXPECTED = {"01_weight_quantization": 11}
