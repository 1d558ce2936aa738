"""Demo student: traffic fused one write (02_fused_rmsnorm)."""

DESCRIPTION = (
    "add_rmsnorm_traffic counts the fused kernel's reads but only one write per element, forgetting that "
    'it also writes the updated residual. Loses both traffic cells, expected 7/11'
)
BASE = "solution"
ANSWERS = {
    '02_fused_rmsnorm/add_rmsnorm_traffic': '''
def add_rmsnorm_traffic(num_tokens, hidden, bytes_per_element):
    """Bytes moved by the unfused torch version and by a fused kernel.

    Args:
        num_tokens: int T >= 1; hidden: int H >= 1; bytes_per_element: bytes of the dtype (4, 2, ...).
    Returns:
        (unfused_bytes, fused_bytes): numbers, by the rule "each operation reads each tensor input
        once and writes its output once"; every tensor has the same dtype.
    """
    rows = num_tokens * hidden
    unfused = (3 * rows                      # residual = x + residual
               + 2 * rows                    # residual.pow(2)
               + rows + num_tokens           # .mean(dim=-1): reads the squares, writes one number per row
               + 2 * num_tokens              # variance + eps
               + 2 * num_tokens              # rsqrt
               + 2 * rows + num_tokens       # residual * inverse_rms
               + 2 * rows + hidden)          # normed * weight
    fused = 3 * rows + hidden                # read x, residual, weight; write out
    return unfused * bytes_per_element, fused * bytes_per_element
''',
}
EXPECTED = {'02_fused_rmsnorm': 7}
