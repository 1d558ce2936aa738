"""Demo student: unpack_int4 returns the raw nibbles, so negative int4 values come back as 8..15."""

DESCRIPTION = (
    "pack_int4 keeps the low 4 bits of each value correctly, but unpack_int4 forgets the sign "
    "extension: -1 comes back as 15, -8 as 8. Loses the two packing cells and the two int4 cells "
    "(dequantize_int4 unpacks with it), expected 9/15"
)
BASE = "solution"
ANSWERS = {
    "pack_int4": '''
def pack_int4(values):
    """Two signed 4-bit values per byte."""
    nibbles = values.to(torch.int16) & 0xF
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).to(torch.uint8)


def unpack_int4(packed):
    """The inverse of pack_int4."""
    low = packed & 0xF
    high = packed >> 4
    return torch.stack([low, high], dim=-1).reshape(packed.shape[0], 2 * packed.shape[1]).to(torch.int8)
''',
}
EXPECTED = {"01_weight_quantization": 9}
