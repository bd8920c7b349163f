"""PyTorch helpers of :mod:`riemattn.analysis.gradients`: constants in the tokens' kind, and the
Euclidean gradient of a torch function from ``torch.autograd.grad`` (HIPS autograd handles NumPy
arrays; the two do not mix). No autograd import here."""

from __future__ import annotations

from collections.abc import Callable

from .._backend import convert, is_torch
from ..errors import ValidationError


def _P_like(P, x):
    """The (checked, NumPy) matrix P as an array of the tokens' kind (tensors: their device, dtype)."""
    return convert(P, x) if is_torch(x) else P


def _torch_gradient(f: Callable, x):
    """df/dx for tokens given as a tensor and ``f`` written with torch (torch.autograd.grad)."""
    import torch

    z = x.detach().requires_grad_()
    try:
        with torch.enable_grad():
            out = f(z)
            if not is_torch(out) or not out.requires_grad:
                raise TypeError(f"f returned {type(out).__name__} that does not depend on x in torch's graph")
            (G,) = torch.autograd.grad(out.sum(), z)
    except Exception as exc:
        raise ValidationError(
            f"torch.autograd could not differentiate f at x of shape {tuple(x.shape)}: {exc!r}. For a "
            "tensor x, write f with torch operations (for a NumPy x, with autograd.numpy) and return "
            "shape x.shape[:-2] or a scalar."
        ) from exc
    if not bool(G.isfinite().all()):
        raise ValidationError(f"the gradient of f at x is not a finite array of shape {tuple(x.shape)}.")
    return G
