"""The fused residual add + RMSNorm kernel against torch (and against the model's own RMSNorm), its
byte count against a measurement with count_bytes, and the byte counter itself."""

from __future__ import annotations

import pytest
import torch

import course_lib.kernels  # noqa: F401
from course_lib.kernels.byte_counter import count_bytes
from course_lib.kernels.tolerances import assert_close
from course_lib.kernels.rmsnorm import (
    MAX_HIDDEN,
    add_rmsnorm_flops,
    add_rmsnorm_ref,
    add_rmsnorm_traffic,
    fused_add_rmsnorm,
    unfused_add_rmsnorm,
)


def _inputs(tokens, hidden, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=generator)
    residual = torch.randn(tokens, hidden, generator=generator)
    weight = torch.rand(hidden, generator=generator) + 0.5
    return x.to(dtype), residual.to(dtype), weight.to(dtype)


@pytest.mark.parametrize("tokens, hidden", [(1, 1), (3, 64), (4, 576), (2, 1000)])
def test_fused_kernel_matches_torch_in_float64(tokens, hidden):
    x, residual, weight = _inputs(tokens, hidden, seed=hidden)
    out, new_residual = fused_add_rmsnorm(x, residual, weight, 1e-5)
    expected_out, expected_residual = add_rmsnorm_ref(x.double(), residual.double(), weight.double(), 1e-5)
    assert_close(out, expected_out)
    assert_close(new_residual, expected_residual)


def test_fused_kernel_half_precision_and_strided_rows():
    x, residual, weight = _inputs(3, 576, torch.bfloat16, seed=1)
    out, _ = fused_add_rmsnorm(x, residual, weight, 1e-5)
    expected, _ = add_rmsnorm_ref(x.double(), residual.double(), weight.double(), 1e-5)
    assert_close(out, expected)
    wide = torch.randn(4, 80)
    out, new_residual = fused_add_rmsnorm(wide[:, :64], torch.zeros(4, 64), torch.ones(64), 0.0)
    torch.testing.assert_close(new_residual, wide[:, :64])
    torch.testing.assert_close(out, wide[:, :64] * torch.rsqrt(wide[:, :64].pow(2).mean(-1, keepdim=True)))


def test_fused_kernel_agrees_with_the_models_rmsnorm():
    from course_lib.model import RMSNorm

    x, residual, weight = _inputs(5, 32, seed=2)
    norm = RMSNorm(weight, 1e-5)
    out, _ = fused_add_rmsnorm(x, residual, weight, 1e-5)
    torch.testing.assert_close(out, norm(x + residual), atol=1e-5, rtol=1e-5)


def test_unfused_version_equals_the_reference():
    x, residual, weight = _inputs(3, 100, seed=3)
    for got, expected in zip(unfused_add_rmsnorm(x, residual, weight, 1e-5), add_rmsnorm_ref(x, residual, weight, 1e-5)):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("tokens, hidden, dtype", [(1, 1, torch.float32), (7, 13, torch.float16),
                                                   (4096, 4096, torch.bfloat16)])
def test_traffic_formula_equals_the_measurement(tokens, hidden, dtype):
    meta = lambda *shape: torch.empty(*shape, dtype=dtype, device="meta")
    measured = count_bytes(unfused_add_rmsnorm, meta(tokens, hidden), meta(tokens, hidden), meta(hidden), 1e-5)
    unfused, fused = add_rmsnorm_traffic(tokens, hidden, dtype.itemsize)
    assert measured.total == unfused
    assert fused == (4 * tokens * hidden + hidden) * dtype.itemsize
    if tokens * hidden >= 2**20:
        assert unfused / fused == pytest.approx(2.5, rel=0.01)


def test_flops_are_five_per_element_plus_three_per_row():
    assert add_rmsnorm_flops(2, 10) == 5 * 20 + 6


def test_byte_counter_counts_reads_writes_and_skips_views():
    x = torch.ones(4, 8)
    traffic = count_bytes(lambda t: (t * 2).unsqueeze(0).sum(), x)
    assert [op.name for op in traffic.operations] == ["mul", "sum"]
    assert traffic.bytes_read == 2 * 4 * 8 * 4 and traffic.bytes_written == 4 * 8 * 4 + 4
    assert float(traffic.result) == 64.0
    assert "total" in traffic.table()
    with pytest.raises(TypeError, match="callable"):
        count_bytes(42)


@pytest.mark.parametrize("args, error, words", [
    ((torch.ones(2, 4), torch.ones(2, 5), torch.ones(4), 1e-5), ValueError, "residual must have x's shape"),
    ((torch.ones(2, 4), torch.ones(2, 4), torch.ones(5), 1e-5), ValueError, "weight must have shape"),
    ((torch.ones(4), torch.ones(4), torch.ones(4), 1e-5), ValueError, "2-D"),
    ((torch.ones(2, 4), torch.ones(2, 4), torch.ones(4), -1.0), ValueError, "eps"),
    ((torch.ones(2, 4).double(), torch.ones(2, 4).double(), torch.ones(4), 1e-5), TypeError, "float16"),
    ((torch.ones(4, 2).t(), torch.ones(2, 4), torch.ones(4), 1e-5), ValueError, "contiguous"),
])
def test_fused_kernel_rejects_bad_input(args, error, words):
    with pytest.raises(error, match=words):
        fused_add_rmsnorm(*args)


def test_traffic_rejects_bad_input():
    with pytest.raises(ValueError, match="num_tokens"):
        add_rmsnorm_traffic(0, 4, 2)
    with pytest.raises(ValueError, match="bytes_per_element"):
        add_rmsnorm_traffic(1, 4, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [576, 4096, 8192, MAX_HIDDEN])   # MAX_HIDDEN: 16,384 lanes in 8 warps
def test_gpu_fused_kernel_compiled_matches_float64(dtype, hidden):
    x, residual, weight = _inputs(32, hidden, dtype, seed=hidden)
    out, new_residual = fused_add_rmsnorm(x.cuda(), residual.cuda(), weight.cuda(), 1e-5)
    expected_out, expected_residual = add_rmsnorm_ref(x.double(), residual.double(), weight.double(), 1e-5)
    assert_close(new_residual, expected_residual)
    assert_close(out, expected_out)
