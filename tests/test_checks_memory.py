"""The chapter-2 checks (course_lib.checks.memory) accept the reference answers and reject each demo
student's bug with feedback that names the mistake.

The answers come from the solution notebook's answer cells and the demo specs, run with exec in a
fresh namespace (the notebook itself is not run), so these tests stay fast.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import nbformat
import pytest

from autograde.authoring import points_summary
from course_lib.checks import CheckFailed
from course_lib.checks import memory as checks
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "02_training_vs_inference"
SOLUTION = ROOT / "solutions" / "lab01-text-to-tensors" / f"{NOTEBOOK}.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab01-text-to-tensors"
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: every answer cell run, some replaced."""
    namespace = {"__name__": "__main__", "math": math, "BYTES_PER_ELEMENT": dict(BYTES_PER_ELEMENT)}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo_specs() -> dict[str, dict]:
    specs = {path.stem: runpy.run_path(str(path)) for path in sorted(DEMO_SPECS.glob("*.py"))}
    return {name: spec for name, spec in specs.items() if NOTEBOOK in spec.get("EXPECTED", {})}


def _demo(name: str) -> dict:
    return _student(_demo_specs()[name]["ANSWERS"])


def _failure(check, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as caught:
        check(*args, **kwargs)
    return str(caught.value)


@pytest.fixture(scope="module")
def reference():
    return _student()


CONFIGS = [
    (checks.small_config(), False),
    (checks.small_config(), True),
    (checks.small_config(num_layers=1, num_kv_heads=1), True),
    (checks.small_config(num_q_heads=4, num_kv_heads=4, head_dim=12), False),
    (checks.LLAMA2_7B, False),
    (checks.LLAMA2_13B, False),
]


def test_reference_answers_pass_every_check(reference):
    smollm2 = checks.smollm2_config()
    checks.check_tensor_shapes(reference["tensor_shapes"], smollm2, True, expected=checks.smollm2_tensor_shapes())
    checks.check_count_parameters(reference["count_parameters"], smollm2, True,
                                  expected=checks.smollm2_parameter_count())
    for config, tied in CONFIGS:
        checks.check_tensor_shapes(reference["tensor_shapes"], config, tied)
        checks.check_count_parameters(reference["count_parameters"], config, tied)
        checks.check_activation_bytes(reference["activation_bytes"], config, 3, 17, 2)
        for precision in BYTES_PER_ELEMENT:
            checks.check_inference_memory(reference["inference_memory"], 1_234_567, precision, config, 2, 99, "bf16")
    for precision in ("fp32", "fp16", "bf16"):
        checks.check_training_memory(reference["training_memory"], 13_015_864_320, precision, 5.5e9)
    checks.check_inference_memory(reference["inference_memory"], 10, "fp16", smollm2, 0, 0, "int4")


def test_published_counts_are_what_the_hidden_tests_expect(reference):
    assert reference["count_parameters"](checks.LLAMA2_7B, False) == 6_738_415_616
    assert reference["count_parameters"](checks.LLAMA2_13B, False) == 13_015_864_320
    assert checks.smollm2_parameter_count() == 134_515_008


def test_worked_examples_of_the_notebook(reference):
    tiny = checks.small_config(num_layers=1, hidden_size=8, num_q_heads=2, num_kv_heads=1, head_dim=4,
                               vocab_size=10, intermediate_size=16)
    assert reference["activation_bytes"](tiny, 2, 3, 2) == 1_632
    memory = reference["inference_memory"](13_015_864_320, "fp16", checks.LLAMA2_13B, 8, 2048, "fp16")
    assert round(memory["weights"] / 1e9, 1) == 26.0
    assert memory["kv_cache"] == 8 * 2048 * 819_200
    assert reference["inference_memory"](13_015_864_320, "int4", checks.LLAMA2_13B, 1, 0)["weights"] / 1e9 == \
        pytest.approx(6.5, abs=0.01)
    training = reference["training_memory"](134_515_008, "bf16", 0)
    assert training["optimizer"] == 1_614_180_096


def test_forgetting_gqa_is_rejected_with_a_hint():
    buggy = _demo("buggy-gqa-kv-heads")
    message = _failure(checks.check_tensor_shapes, buggy["tensor_shapes"], checks.smollm2_config(), True,
                       expected=checks.smollm2_tensor_shapes())
    assert "k_proj" in message and "num_kv_heads = 3" in message
    message = _failure(checks.check_count_parameters, buggy["count_parameters"], checks.smollm2_config(), True)
    assert "grouped-query attention" in message
    # Without GQA (Llama-2: as many KV heads as query heads) the bug is invisible.
    checks.check_count_parameters(buggy["count_parameters"], checks.LLAMA2_7B, False)


def test_counting_a_tied_head_twice_is_rejected_with_a_hint():
    buggy = _demo("buggy-tied-head-twice")
    message = _failure(checks.check_count_parameters, buggy["count_parameters"], checks.smollm2_config(), True,
                       expected=checks.smollm2_parameter_count())
    assert "tied embeddings store the table once" in message
    checks.check_count_parameters(buggy["count_parameters"], checks.LLAMA2_13B, False)


def test_a_listed_tied_head_is_rejected_with_a_hint(reference):
    def tensor_shapes(config, tied_embeddings):
        shapes = reference["tensor_shapes"](config, False)
        return shapes

    message = _failure(checks.check_tensor_shapes, tensor_shapes, checks.small_config(), True)
    assert "ties its embeddings" in message


def test_transposed_shapes_are_rejected_with_a_hint(reference):
    def tensor_shapes(config, tied_embeddings):
        return {name: tuple(reversed(shape)) for name, shape in reference["tensor_shapes"](config, tied_embeddings).items()}

    message = _failure(checks.check_tensor_shapes, tensor_shapes, checks.small_config(), True)
    assert "(in_features, out_features)" in message


def test_missing_master_copy_is_rejected_with_a_hint():
    buggy = _demo("buggy-no-master-copy")
    checks.check_training_memory(buggy["training_memory"], 1_000, "fp32", 123.0)
    message = _failure(checks.check_training_memory, buggy["training_memory"], 134_515_008, "bf16", 0)
    assert "'optimizer'" in message and "master copy" in message


def test_kv_cache_with_query_heads_is_rejected_with_a_hint():
    buggy = _demo("buggy-kv-query-heads")
    checks.check_inference_memory(buggy["inference_memory"], 13_015_864_320, "fp16", checks.LLAMA2_13B, 8, 2048)
    message = _failure(checks.check_inference_memory, buggy["inference_memory"], 134_515_008, "fp32",
                       checks.smollm2_config(), 4, 1000, "fp32")
    assert "'kv_cache'" in message and "num_kv_heads = 3" in message


def test_activation_mistakes_get_their_hints(reference):
    config = checks.small_config()

    def without_scores(config, batch_size, seq_len, bytes_per_number):
        full = reference["activation_bytes"](config, batch_size, seq_len, bytes_per_number)
        return full - config.num_layers * config.num_q_heads * seq_len * batch_size * seq_len * bytes_per_number

    assert "attention probabilities" in _failure(checks.check_activation_bytes, without_scores, config, 2, 10, 2)

    def numbers_not_bytes(config, batch_size, seq_len, bytes_per_number):
        return reference["activation_bytes"](config, batch_size, seq_len, 1)

    assert "multiply by bytes_per_number" in _failure(checks.check_activation_bytes, numbers_not_bytes, config, 2, 10, 4)


def test_wrong_return_types_are_reported(reference):
    def training_memory(num_parameters, precision, activations):
        return 16 * num_parameters + activations

    assert "must return a dict" in _failure(checks.check_training_memory, training_memory, 10, "bf16", 0)

    def count_parameters(config, tied_embeddings):
        return float(reference["count_parameters"](config, tied_embeddings)) + 0.5

    assert "must return an int" in _failure(checks.check_count_parameters, count_parameters, checks.small_config(), True)


def test_a_crash_becomes_feedback_that_names_the_call():
    def count_parameters(config, tied_embeddings):
        return config.num_heads * 2

    message = _failure(checks.check_count_parameters, count_parameters, checks.small_config(), True)
    assert "count_parameters(" in message and "AttributeError" in message


def test_a_stub_reports_not_implemented():
    def inference_memory(num_parameters, precision, config, batch_size, seq_len, kv_precision="fp16"):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_inference_memory(inference_memory, 10, "fp16", checks.small_config(), 1, 1)


def test_reexporting_the_reference_earns_nothing():
    import course_lib.memory as memory_module

    assert "reference" in _failure(checks.check_count_parameters, memory_module.count_parameters,
                                   checks.small_config(), True)

    def training_memory(num_parameters, precision, activations):
        return memory_module.training_memory(num_parameters, precision, activations)

    assert "reference" in _failure(checks.check_training_memory, training_memory, 10, "bf16", 0)


@pytest.mark.parametrize("name", sorted(_demo_specs()))
def test_demo_specs_name_real_answer_cells(name):
    spec = _demo_specs()[name]
    assert spec["BASE"] == "solution"
    assert set(spec.get("ANSWERS", {})) <= set(_answer_sources())   # a spec may hand in only files (timestamp.txt)
    assert list(spec["EXPECTED"]) == [NOTEBOOK]
    assert f"expected {spec['EXPECTED'][NOTEBOOK]:g}/12" in spec["DESCRIPTION"]


def test_header_announces_the_points():
    notebook = nbformat.read(SOLUTION, as_version=4)
    cells = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade") and cell.cell_type == "code"]
    points = sum(cell.metadata["nbgrader"]["points"] for cell in cells)
    assert points_summary(notebook) in notebook.cells[0].source   # its written answer's points too
    assert f"{points:g} in {len(cells)} graded test cells" in notebook.cells[0].source


def test_training_memory_must_refuse_inference_precisions(reference):
    for precision in ("int8", "int4", "FP32", "fp64"):
        checks.check_training_memory(reference["training_memory"], 10, precision, 0)
    message = _failure(checks.check_training_memory, _demo("buggy-training-memory-any-precision")["training_memory"],
                       1_000, "int8", 0)
    assert "returned instead of raising ValueError" in message

    def key_error(num_parameters, precision, activations):
        per_parameter = {"fp32": 16, "fp16": 16, "bf16": 16}[precision]
        return {"weights": 0, "gradients": 0, "optimizer": num_parameters * per_parameter, "activations": activations}

    assert "raised KeyError; the documented error is ValueError" in _failure(
        checks.check_training_memory, key_error, 10, "int4", 0)


def test_hard_coded_smollm2_count_fails_on_other_configs():
    buggy = _demo("buggy-hardcoded-smollm2-count")
    checks.check_count_parameters(buggy["count_parameters"], checks.smollm2_config(), True,
                                  expected=checks.smollm2_parameter_count())
    message = _failure(checks.check_count_parameters, buggy["count_parameters"], checks.small_config(), True)
    assert "RMSNorm weights are parameters too" in message


def test_students_get_a_model_config_built_for_them(reference):
    seen = []

    def count_parameters(config, tied_embeddings):
        seen.append(config)
        return reference["count_parameters"](config, tied_embeddings)

    config = checks.small_config()
    checks.check_count_parameters(count_parameters, config, True)
    assert seen and seen[0] == config and seen[0] is not config   # a copy built with checks.make, equal in value


def test_kv_cache_at_two_bytes_whatever_its_precision_fails_the_int8_case_with_a_hint():
    buggy = _demo("buggy-kv-cache-always-fp16")
    checks.check_inference_memory(buggy["inference_memory"], 13_015_864_320, "fp16", checks.LLAMA2_13B, 8, 2048, "fp16")
    message = _failure(checks.check_inference_memory, buggy["inference_memory"], 6_738_415_616, "fp32",
                       checks.LLAMA2_7B, 2, 4096, "int8")
    assert "'kv_cache'" in message and "kv_precision is 'int8'" in message and "2 bytes a number" in message


def test_the_visible_smollm2_case_catches_the_query_heads():
    buggy = _demo("buggy-kv-query-heads")
    message = _failure(checks.check_inference_memory, buggy["inference_memory"], 134_515_008, "bf16",
                       checks.smollm2_config(), 4, 1000, "bf16")
    assert "num_kv_heads = 3, not num_q_heads = 9" in message
