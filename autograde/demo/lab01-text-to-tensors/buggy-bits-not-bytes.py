"""Demo student: bytes_per_element returns the number of bits."""

DESCRIPTION = (
    "bytes_per_element returns bits (16 for 'fp16') instead of bytes; embedding_bytes itself is right "
    "and its tests pass their own bytes per element: loses test_bytes_per_element only, expected 22/23"
)
BASE = "solution"
ANSWERS = {
    "bytes_per_element": '''
def bytes_per_element(precision):
    """Bytes taken by one number stored in `precision`."""
    digits = "".join(character for character in precision if character.isdigit())
    return float(digits)
''',
}
EXPECTED = {"01_tokenization": 22}
