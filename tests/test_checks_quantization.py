"""The Lab 0.4 chapter 1-2 checks (course_lib.checks.quantization) accept the reference answers of
solutions/lab04-faster-decoding/01_weight_quantization.ipynb and 02_quantized_smollm2.ipynb and reject
typical bugs, including each demo student's, with feedback that names the mistake.

The answers are run with exec in a fresh namespace, as a student's kernel would run them.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import quantization as checks
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "lab04-faster-decoding"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab04-faster-decoding"


def _student(notebook: str, replacements: dict[str, str] | None = None) -> dict:
    namespace = {"__name__": "__main__", "math": math, "torch": torch}
    for grade_id, source in answer_sources(SOLUTIONS / f"{notebook}.ipynb").items():
        source = (replacements or {}).get(grade_id, source)
        exec(compile(source, f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _replace(notebook: str, grade_id: str, old: str, new: str) -> dict:
    source = answer_sources(SOLUTIONS / f"{notebook}.ipynb")[grade_id]
    assert old in source, f"{old!r} not in the reference answer {grade_id}"
    return _student(notebook, {grade_id: source.replace(old, new)})


def _demo(name: str) -> dict:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


CH1 = "01_weight_quantization"
CH2 = "02_quantized_smollm2"


@pytest.fixture(scope="module")
def ch1():
    return _student(CH1)


# ----- chapter 1: the reference answers pass ----------------------------------------------------


def test_reference_int8_answers_pass(ch1):
    checks.check_int8_symmetric(ch1["quantize_int8"], ch1["dequantize_int8"], 6, 40, seed=0, zero_row=True)
    checks.check_int8_symmetric(ch1["quantize_int8"], ch1["dequantize_int8"], 16, 16, seed=1, outlier=True)
    checks.check_int8_symmetric(ch1["quantize_int8"], ch1["dequantize_int8"], 33, 7, seed=4, zero_row=True,
                                outlier=True)
    checks.check_int8_asymmetric(ch1["quantize_int8_asymmetric"], ch1["dequantize_int8_asymmetric"], 6, 40,
                                 seed=0, offset=4.0)
    checks.check_int8_asymmetric(ch1["quantize_int8_asymmetric"], ch1["dequantize_int8_asymmetric"], 20, 64,
                                 seed=5, zero_row=True)


def test_reference_int4_answers_pass(ch1):
    checks.check_pack_int4(ch1["pack_int4"], ch1["unpack_int4"], 2, 512, seed=0)
    checks.check_pack_int4(ch1["pack_int4"], ch1["unpack_int4"], 1, 2, seed=2)
    checks.check_int4_groups(ch1["quantize_int4"], ch1["dequantize_int4"], 4, 64, 32, seed=0)
    checks.check_int4_groups(ch1["quantize_int4"], ch1["dequantize_int4"], 8, 128, 64, seed=2, zero_row=True)
    checks.check_int4_groups(ch1["quantize_int4"], ch1["dequantize_int4"], 5, 16, 8, seed=4)


def test_reference_gguf_answers_pass(ch1):
    checks.check_gguf_blocks(ch1["dequantize_q8_0"], ch1["dequantize_q4_1"], "file", 4, seed=0)
    checks.check_gguf_blocks(ch1["dequantize_q8_0"], ch1["dequantize_q4_1"], "synthetic", 5, seed=7)


def test_a_tie_in_rounding_is_not_a_bug(ch1):
    # floor(x + 0.5) rounds ties up where torch.round rounds them to even: both are right.
    student = _replace(CH1, "int8_symmetric", "q = torch.round(weight / scale[:, None])",
                       "q = torch.floor(weight / scale[:, None] + 0.5)")
    checks.check_int8_symmetric(student["quantize_int8"], student["dequantize_int8"], 16, 16, seed=1, outlier=True)


# ----- chapter 1: bugs fail with a hint that names them -------------------------------------------


def _fails(call, *needles):
    with pytest.raises(CheckFailed) as failure:
        call()
    message = str(failure.value)
    for needle in needles:
        assert needle in message, message
    return message


def test_demo_scale_from_the_wrong_axis_fails():
    student = _student(CH1, _demo("buggy-scale-wrong-axis"))
    _fails(lambda: checks.check_int8_symmetric(student["quantize_int8"], student["dequantize_int8"], 6, 40, seed=0),
           "wrong shape", "dim=1")
    _fails(lambda: checks.check_int8_symmetric(student["quantize_int8"], student["dequantize_int8"], 16, 16, seed=1),
           "columns' max")


def test_demo_int4_sign_lost_fails():
    student = _student(CH1, _demo("buggy-int4-sign-lost"))
    _fails(lambda: checks.check_pack_int4(student["pack_int4"], student["unpack_int4"], 2, 512), "sign is lost")
    _fails(lambda: checks.check_int4_groups(student["quantize_int4"], student["dequantize_int4"], 4, 64, 32),
           "dequantize_int4", "sign of negative codes")


@pytest.mark.parametrize("old, new, needle", [
    ("scale = weight.abs().amax(dim=1) / 127", "scale = weight.abs().amax(dim=1) / 255", "scale"),
    ("    scale = torch.where(scale > 0, scale, torch.ones_like(scale))\n    q = torch.round(weight / scale[:, None])",
     "    q = torch.round(weight / scale[:, None])", "row of zeros"),
    ("return q.float() * scale.float()[:, None]", "return q.float()", "dequantize_int8"),
])
def test_int8_bugs_fail(old, new, needle):
    student = _replace(CH1, "int8_symmetric", old, new)
    _fails(lambda: checks.check_int8_symmetric(student["quantize_int8"], student["dequantize_int8"], 6, 40, seed=0,
                                               zero_row=True), needle)


def test_asymmetric_uint8_wraparound_fails():
    student = _replace(CH1, "int8_asymmetric", "return q.float() * scale.float()[:, None] + minimum.float()[:, None]",
                       "return (q * scale[:, None] + minimum[:, None]).float()")
    # uint8 * float promotes to float in torch, so this one is right; a uint8 sum is not:
    checks.check_int8_asymmetric(student["quantize_int8_asymmetric"], student["dequantize_int8_asymmetric"], 6, 40,
                                 offset=4.0)
    student = _replace(CH1, "int8_asymmetric", "minimum = weight.amin(dim=1)", "minimum = weight.amin(dim=1) * 0")
    _fails(lambda: checks.check_int8_asymmetric(student["quantize_int8_asymmetric"],
                                                student["dequantize_int8_asymmetric"], 6, 40, offset=4.0), "minimum")


@pytest.mark.parametrize("old, new, needle", [
    ("nibbles = values.to(torch.int16) & 0xF", "nibbles = values.to(torch.int16)", "low 4 bits"),
    ("(nibbles[:, 0::2] | (nibbles[:, 1::2] << 4))", "(nibbles[:, 1::2] | (nibbles[:, 0::2] << 4))", "LOW 4 bits"),
])
def test_packing_bugs_fail(old, new, needle):
    student = _replace(CH1, "pack_int4", old, new)
    _fails(lambda: checks.check_pack_int4(student["pack_int4"], student["unpack_int4"], 2, 512), needle)


@pytest.mark.parametrize("old, new, needle", [
    ("scale = groups.abs().amax(dim=2) / 7", "scale = groups.abs().amax(dim=2) / 8", "wrong number of steps"),
    ("values * scale.float().repeat_interleave(group_size, dim=1)", "values * scale.float().repeat(1, group_size)",
     "repeat_interleave"),
])
def test_int4_group_bugs_fail(old, new, needle):
    student = _replace(CH1, "int4_groups", old, new)
    _fails(lambda: checks.check_int4_groups(student["quantize_int4"], student["dequantize_int4"], 3, 96, 32, seed=1),
           needle)


def test_per_row_int4_scale_fails():
    student = _replace(CH1, "int4_groups", "scale = groups.abs().amax(dim=2) / 7",
                       "scale = groups.abs().amax(dim=(1, 2))[:, None].expand(-1, groups.shape[1]) / 7")
    _fails(lambda: checks.check_int4_groups(student["quantize_int4"], student["dequantize_int4"], 3, 96, 32, seed=1),
           "row's scale")


@pytest.mark.parametrize("old, new, needle", [
    ("codes = torch.cat([code_bytes & 0xF, code_bytes >> 4], dim=1).float()",
     "codes = torch.stack([code_bytes & 0xF, code_bytes >> 4], dim=-1).reshape(-1, 32).float()", "nibble order"),
    ("return (codes * scale + minimum).reshape(*raw.shape[:-1], -1)",
     "return (codes * scale).reshape(*raw.shape[:-1], -1)", "minimum m"),
])
def test_gguf_q4_1_bugs_fail(old, new, needle):
    student = _replace(CH1, "gguf_blocks", old, new)
    _fails(lambda: checks.check_gguf_blocks(student["dequantize_q8_0"], student["dequantize_q4_1"], "synthetic", 4,
                                            seed=3), needle)


def test_gguf_q8_0_signed_codes_matter():
    student = _replace(CH1, "gguf_blocks", "codes = blocks[:, 2:].contiguous().view(torch.int8).float()",
                       "codes = blocks[:, 2:].float()")
    _fails(lambda: checks.check_gguf_blocks(student["dequantize_q8_0"], student["dequantize_q4_1"], "file", 2),
           "dequantize_q8_0", "int8")


def test_the_reference_itself_is_refused(ch1):
    from course_lib import quantization

    _fails(lambda: checks.check_int8_symmetric(quantization.quantize_int8, ch1["dequantize_int8"], 4, 8),
           "reference implementation")


# ----- chapter 2 --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ch2_functions():
    namespace = {"__name__": "__main__", "math": math, "torch": torch}
    sources = answer_sources(SOLUTIONS / f"{CH2}.ipynb")
    for grade_id in ("perplexity", "decode_step_bytes", "kv_int8"):
        exec(compile(sources[grade_id], f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def test_reference_chapter2_answers_pass(ch2_functions):
    checks.check_perplexity(ch2_functions["perplexity"], "tiny", 50, 20, seed=0)
    checks.check_perplexity(ch2_functions["perplexity"], "tiny", 61, 30, seed=2)
    checks.check_decode_step_bytes(ch2_functions["decode_step_bytes"], "llama-2-7b", 4.5, 8, 4096,
                                   lm_head_bits_per_weight=16, kv_bits_per_value=16)
    checks.check_decode_step_bytes(ch2_functions["decode_step_bytes"], "tiny", 8.25, 3, 17, lm_head_bits_per_weight=8)
    checks.check_kv_int8(ch2_functions["quantize_kv_int8"], ch2_functions["dequantize_kv_int8"], 7, 3, 64)


def test_decode_step_bytes_of_the_worked_example(ch2_functions):
    from course_lib.model import ModelConfig

    total = ch2_functions["decode_step_bytes"](ModelConfig.from_gguf(), 32, 1, 128)
    assert total == pytest.approx(424.7e6 + 113.2e6 + 128 * 46_080, rel=1e-3)


def test_demo_perplexity_without_the_shift_fails():
    student = _student(CH2, _demo("buggy-perplexity-no-shift"))
    _fails(lambda: checks.check_perplexity(student["perplexity"], "tiny", 50, 20), "row t of the logits predicts")


@pytest.mark.parametrize("old, new, needle", [
    ("return math.exp(total_nll / num_predicted)", "return total_nll / num_predicted", "its exp"),
    ("return math.exp(total_nll / num_predicted)", "return 2 ** (total_nll / num_predicted)", "natural log"),
    ("chunk = token_ids[start : start + window]", "chunk = token_ids[start:]", "windows of at most"),
])
def test_perplexity_bugs_fail(old, new, needle):
    student = _replace(CH2, "perplexity", old, new)
    _fails(lambda: checks.check_perplexity(student["perplexity"], "tiny", 50, 20), needle)


@pytest.mark.parametrize("old, new, needle", [
    ("return bits / 8", "return bits", "bits"),
    ("bits += batch_size * context_len * 2 * config.num_layers * kv_size * kv_bits_per_value", "bits += 0", "KV cache"),
    ("bits += config.vocab_size * hidden * lm_head_bits_per_weight", "bits += 0", "output layer"),
])
def test_decode_step_bytes_bugs_fail(old, new, needle):
    student = _replace(CH2, "decode_step_bytes", old, new)
    _fails(lambda: checks.check_decode_step_bytes(student["decode_step_bytes"], "smollm2", 32, 4, 128), needle)


def test_kv_scale_per_tensor_fails():
    student = _replace(CH2, "kv_int8", "scale = x.abs().amax(dim=2) / 127",
                       "scale = (x.abs().amax() / 127).expand(x.shape[0], x.shape[1])")
    _fails(lambda: checks.check_kv_int8(student["quantize_kv_int8"], student["dequantize_kv_int8"], 7, 3, 64),
           "one scale per token and head")


@pytest.mark.slow
def test_perplexity_check_on_smollm2(ch2_functions):
    checks.check_perplexity(ch2_functions["perplexity"], "smollm2", 48, 24)
    student = _student(CH2, _demo("buggy-perplexity-no-shift"))
    _fails(lambda: checks.check_perplexity(student["perplexity"], "smollm2", 40, 16), "row t of the logits")


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_lab04_headers_count_the_graded_test_cells(path):
    import re

    import nbformat

    from course_lib.handin.notebooks import nbgrader_meta

    notebook = nbformat.read(path, as_version=4)
    graded = [cell for cell in notebook.cells if nbgrader_meta(cell).get("grade") and cell.cell_type == "code"]
    announced = re.search(r"in (\d+) graded test cells", notebook.cells[0].source)
    assert announced and int(announced.group(1)) == len(graded), \
        f"{path.name}: the header announces {announced and announced.group(1)} graded test cells, there are {len(graded)}"
