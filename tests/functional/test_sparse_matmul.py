import pytest
import torch

from lightgraph.functional.sparse_matmul import cached_transpose_spmm, spmm_with_cached_transpose


def _csr(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    dense = (torch.rand(7, 9, generator=gen) < 0.3).double() * torch.rand(
        7, 9, generator=gen, dtype=torch.float64
    )
    dense[3] = 0  # an empty row
    return dense, dense.to_sparse_csr()


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_matches_dense_forward_and_backward(reduce: str) -> None:
    dense, adj = _csr()
    x = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    y = cached_transpose_spmm(adj, adj.t().to_sparse_csr(), x, reduce)
    nnz = (dense != 0).sum(1, keepdim=True).clamp(min=1)
    ref_x = x.detach().clone().requires_grad_()
    ref = dense @ ref_x if reduce == "sum" else (dense @ ref_x) / nnz
    torch.testing.assert_close(y, ref)
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g)
    torch.testing.assert_close(x.grad, ref_x.grad)


def test_context_routes_only_the_registered_matrix() -> None:
    dense, adj = _csr()
    _, other = _csr(1)
    x = torch.randn(9, 2, dtype=torch.float64, requires_grad=True)
    with spmm_with_cached_transpose(adj, adj.t().to_sparse_csr()):
        y = torch.sparse.mm(adj, x)
        z = torch.sparse.mm(other, x)
    assert y.grad_fn.name().endswith("_CachedTransposeSpmmBackward")
    assert "CachedTranspose" not in z.grad_fn.name()
    torch.testing.assert_close(y, dense @ x)


def test_bad_reduce() -> None:
    _, adj = _csr()
    with pytest.raises(ValueError, match="`reduce` in \\('sum', 'mean'\\) but got 'max'"):
        cached_transpose_spmm(adj, adj, torch.randn(9, 1, dtype=torch.float64), "max")
