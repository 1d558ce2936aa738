"""Demo student: bytes per element with integer division, so int4 takes 0 bytes."""

DESCRIPTION = (
    "bytes_per_element divides bits by 8 with //, so 'int4' (4 bits) takes 0 bytes instead of 0.5; every other "
    "precision is a whole number of bytes and comes out right. The visible test now includes int4 and its hint "
    "names the integer division: loses test_bytes_per_element (1 point), expected 22/23"
)
BASE = "solution"
ANSWERS = {
    "bytes_per_element": '''
def bytes_per_element(precision):
    """Bytes taken by one number stored in `precision`."""
    bits = {"fp64": 64, "fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}
    if precision not in bits:
        raise ValueError(f"precision must be one of {sorted(bits)}, got {precision!r}")
    return bits[precision] // 8
''',
}
EXPECTED = {"01_tokenization": 22}
