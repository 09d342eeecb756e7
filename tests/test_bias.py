"""``cudnn_gnn._bias``: column sums of tall tensors and the bias add with that gradient.

Their CUDA path is taken for 2-D CUDA tensors of at least ``COLUMN_SUM_MIN_ROWS`` rows; here (no GPU) the tests
route CPU tensors through it by patching ``_tall_cuda``, so the split sum's arithmetic and the autograd Function
run; ``tests/gpu/test_bias_gpu.py`` runs them on the GPU at size."""

from __future__ import annotations

import pytest
import torch

from cudnn_gnn import _bias


@pytest.fixture
def tall(monkeypatch):
    monkeypatch.setattr(_bias, "_tall_cuda", lambda x: x.dim() == 2)


@pytest.mark.parametrize("rows", [1, 127, 128, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_column_sum_equals_the_plain_sum(rows, dtype, tall):
    """The split sum, row counts below, at and past a split block (128 rows), float32 and bfloat16: the column
    sums of ``x.sum(0)``, in ``x``'s dtype (bfloat16 within its rounding of the float64 sums)."""
    x = torch.randn(rows, 37, generator=torch.Generator().manual_seed(rows)).to(dtype)
    got = _bias.column_sum(x)
    assert got.dtype == dtype and got.shape == (37,)
    want = x.double().sum(0)
    tol = dict(atol=1e-4, rtol=1e-5) if dtype == torch.float32 else dict(atol=0.1, rtol=1e-2)
    torch.testing.assert_close(got.double(), want, **tol)


def test_small_and_compiled_inputs_keep_the_plain_sum(monkeypatch):
    """Below ``COLUMN_SUM_MIN_ROWS`` rows, or on a CPU tensor: ``x.sum(0)`` itself and a plain add (no autograd
    Function of ours in the graph)."""
    x = torch.randn(50, 4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    assert torch.equal(_bias.column_sum(x), x.sum(0))
    y = _bias.bias_add(x, b)
    assert type(y.grad_fn).__name__ == "AddBackward0"
    assert _bias.bias_add(x, None) is x


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_bias_add_values_dtypes_and_gradients(x_dtype, tall):
    """``bias_add`` through its autograd Function: ``x + bias`` with torch's promotion (a float32 bias on a bfloat16
    ``x`` gives float32, as PyG's ``out + self.bias``); the gradients of ``x`` (in its dtype) and of the bias (its
    column sum, in the bias's dtype) equal a plain add's."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(300, 24, generator=gen).to(x_dtype).requires_grad_()
    b = torch.randn(24, generator=gen).requires_grad_()
    y = _bias.bias_add(x, b)
    assert type(y.grad_fn).__name__ == "_BiasAddBackward"
    want = x + b
    assert y.dtype == want.dtype and torch.equal(y, want)
    g = torch.randn(y.shape, generator=gen).to(y.dtype)
    got = torch.autograd.grad(y, (x, b), g)
    ref = torch.autograd.grad(want, (x, b), g)
    for a, r in zip(got, ref, strict=True):
        assert a.dtype == r.dtype
        torch.testing.assert_close(a, r, atol=0.1 if x_dtype == torch.bfloat16 else 1e-5, rtol=1e-2)


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "autocast_bf16"])
@pytest.mark.parametrize("needs", ["all", "weight_bias", "bias"])
def test_linear_equals_f_linear(autocast, needs, tall):
    """``linear`` through its autograd Function (the bias inside the GEMM, its gradient a column sum): the output
    (dtype and values) and every asked gradient (dtypes too) of ``F.linear`` itself, in float32 and under
    ``torch.autocast(bfloat16)`` (inputs cast, product in bfloat16, gradients back in their inputs' dtypes);
    with ``x`` or the weight frozen, no gradient for them."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(300, 20, generator=gen).requires_grad_(needs == "all")
    w = torch.randn(12, 20, generator=gen).requires_grad_(needs != "bias")
    b = torch.randn(12, generator=gen).requires_grad_()
    inputs = [t for t in (x, w, b) if t.requires_grad]
    outs = []
    for fn in (_bias.linear, torch.nn.functional.linear):
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            y = fn(x, w, b)
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(9)).to(y.dtype)
        outs.append((y, torch.autograd.grad(y, inputs, g)))
    (y, got), (want, ref) = outs
    assert type(y.grad_fn).__name__ == "_LinearBackward"
    assert y.dtype == want.dtype
    tol = dict(atol=0.2, rtol=2e-2) if autocast else dict(atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(y, want, **tol)
    for a, r in zip(got, ref, strict=True):
        assert a.dtype == r.dtype
        torch.testing.assert_close(a, r, **tol)


def test_linear_off_its_path_is_f_linear():
    """A CPU or small ``x`` (or a frozen bias): ``F.linear``'s own autograd node."""
    x = torch.randn(50, 4, requires_grad=True)
    w, b = torch.randn(3, 4), torch.randn(3, requires_grad=True)
    assert type(_bias.linear(x, w, b).grad_fn).__name__ == "AddmmBackward0"


def test_bias_gradient_only_where_asked(tall):
    """A frozen bias gets no gradient and no column sum; a frozen ``x`` none either."""
    x = torch.randn(300, 8, requires_grad=True)
    b = torch.randn(8)
    y = _bias.bias_add(x, b)
    assert type(y.grad_fn).__name__ == "AddBackward0"  # the bias needs no gradient: the plain add
    b.requires_grad_()
    (gb,) = torch.autograd.grad(_bias.bias_add(x.detach(), b).sum(), b)
    assert torch.equal(gb, torch.full((8,), 300.0))
