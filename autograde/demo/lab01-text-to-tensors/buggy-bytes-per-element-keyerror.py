"""Demo student: bytes_per_element lets a dict lookup fail instead of raising the documented ValueError."""

DESCRIPTION = (
    "bytes_per_element returns bits[precision] / 8 with no check, so an unknown precision raises KeyError "
    "instead of the ValueError its docstring promises (a caller catching ValueError would crash): loses "
    "test_bytes_per_element (1 point), expected 22/23"
)
BASE = "solution"
ANSWERS = {
    "bytes_per_element": '''
def bytes_per_element(precision):
    """Bytes taken by one number stored in `precision`."""
    bits = {"fp64": 64, "fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}
    return bits[precision] / 8
''',
}
EXPECTED = {"01_tokenization": 22}
