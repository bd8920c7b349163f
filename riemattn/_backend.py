"""Array backends: the numerical core runs on NumPy arrays or PyTorch tensors (CPU or CUDA).

One code path serves both. The core asks :func:`namespace` for the array namespace of its inputs:

- NumPy arrays: :mod:`numpy` itself (NumPy >= 2.1 implements the array API standard in its main
  namespace, so the hot path keeps NumPy's own functions and their speed);
- PyTorch tensors: ``array_api_compat.torch``, PyTorch behind the array API standard's names and
  signatures (``axis=``, ``matrix_transpose``, ``broadcast_to``, ...), from the well-kept
  `array-api-compat <https://data-apis.org/array-api-compat/>`_ library.

Results have the kind, device and dtype of the tokens passed in. Constants of a field (P, U, W
given as NumPy arrays) are converted once per device and dtype and cached. PyTorch is never
imported here: a tensor can only reach the core if the caller imported torch already, so the core
install stays torch-free.

Only the few operations whose spelling differs between the two libraries live here (copies,
conversions, device queries); everything else is written against the array API standard.
"""

from __future__ import annotations

import math
import sys

import numpy as np

__all__ = ["namespace", "is_torch", "device_of", "convert", "to_numpy", "copy", "size", "dot_last",
           "constant", "requires_grad", "like_param", "check_device", "use_device", "default_device"]


def _torch():
    return sys.modules.get("torch")


def is_torch(x) -> bool:
    """Whether ``x`` is a PyTorch tensor (False without importing torch when it is not loaded)."""
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


_TORCH_NS = []


def namespace(*arrays):
    """The array namespace of ``arrays``: :mod:`numpy`, or ``array_api_compat.torch`` if any is a tensor."""
    for a in arrays:
        if is_torch(a):
            if not _TORCH_NS:
                import array_api_compat.torch as xp_torch

                _TORCH_NS.append(xp_torch)
            return _TORCH_NS[0]
    return np


def device_of(x):
    """The device of ``x`` (a ``torch.device``, or ``"cpu"`` for NumPy arrays and scalars)."""
    return x.device if is_torch(x) else "cpu"


def convert(value, like, dtype=None):
    """``value`` (array_like, NumPy array or tensor) as an array of the kind and device of ``like``.

    The dtype is ``dtype`` if given, else the dtype of ``like`` (floating values) -- so a field's
    NumPy float64 constants follow the tokens to float32 on the GPU when the user asks for it.
    """
    if is_torch(like):
        torch = _torch()
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            value = np.array(value)  # torch warns on read-only (e.g. broadcast) arrays
        return torch.as_tensor(value, dtype=like.dtype if dtype is None else dtype, device=like.device)
    if is_torch(value):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=like.dtype if dtype is None else dtype)


def to_numpy(x) -> np.ndarray:
    """A NumPy array of ``x`` (tensors are copied to the host; one synchronisation on a GPU)."""
    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def copy(x):
    """A copy of the array ``x`` (same kind, device, dtype)."""
    return x.clone() if is_torch(x) else x.copy()


def size(x) -> int:
    """Number of elements of ``x`` (NumPy's ``x.size``; a method on tensors)."""
    return math.prod(x.shape)


def dot_last(x, y):
    """Inner product over the last axis, shape ``broadcast(x, y).shape[:-1]``."""
    if is_torch(x) or is_torch(y):
        return (x * y).sum(-1)
    return np.einsum("...i,...i->...", x, y)


def requires_grad(x) -> bool:
    """Whether ``x`` is a PyTorch tensor that requires a gradient (a differentiable parameter)."""
    return is_torch(x) and x.requires_grad


def like_param(value, like):
    """A differentiable parameter ``value`` (a tensor with ``requires_grad``) in ``like``'s kind.

    For tensors ``like``: ``value.to(like's dtype and device)``, which stays in the autograd graph
    (``value`` itself when they already agree); never cached, so that a parameter updated in place
    by an optimizer is read afresh and every call builds a fresh graph. For NumPy ``like``: a
    detached NumPy copy of the current values (NumPy computations carry no gradient).
    """
    if is_torch(like):
        return value.to(dtype=like.dtype, device=like.device)
    return np.asarray(value.detach().cpu().numpy(), dtype=like.dtype)


def constant(cache: dict, key, value, like):
    """``value`` (a NumPy constant) as an array of the kind, device and dtype of ``like``, cached.

    NumPy float64 tokens get ``value`` itself; other kinds get one converted copy per
    (key, device, dtype), stored in ``cache`` (a dict owned by the object holding the constant).
    A tensor ``value`` that requires a gradient is converted afresh (:func:`like_param`).
    """
    if requires_grad(value):
        return like_param(value, like)
    if type(like) is np.ndarray and like.dtype == np.float64:
        return value
    k = (key, str(device_of(like)), str(like.dtype), type(like).__module__)
    out = cache.get(k)
    if out is None:
        out = cache[k] = convert(value, like)
    return out


# ---------------------------------------------------------------------------------------------
# A default device for NumPy inputs (the CLI's --device)
# ---------------------------------------------------------------------------------------------
import contextlib  # noqa: E402
import contextvars  # noqa: E402
import re  # noqa: E402

_DEVICE = contextvars.ContextVar("riemattn_device", default=None)
_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def check_device(device, name: str = "device"):
    """``device`` ("cpu", "cuda" or "cuda:N", or a ``torch.device``) checked and returned as a string.

    "cpu" needs nothing; "cuda..." needs PyTorch (the ``torch`` or ``llm`` extra) and a visible
    GPU of that index. Raises :class:`~riemattn.errors.ValidationError` naming ``name`` otherwise.
    """
    from .errors import ValidationError

    text = str(device)
    if not _DEVICE_RE.match(text):
        raise ValidationError(f"{name} must be 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if text == "cpu":
        return text
    try:
        import torch
    except ImportError:
        raise ValidationError(
            f"{name}={text!r} needs PyTorch: pip install 'riemattn[torch]' (or the llm extra)."
        ) from None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(text.split(":")[1]) if ":" in text else 0
    if index >= count:
        raise ValidationError(
            f"{name}={text!r}: no such CUDA device ({count} visible to PyTorch {torch.__version__})."
        )
    return text


@contextlib.contextmanager
def use_device(device):
    """Within the block, :func:`riemattn.integrate` computes NumPy inputs on ``device``.

    ``device`` is "cpu" (NumPy, the default), "cuda" or "cuda:N" (PyTorch). NumPy tokens are
    copied to the device as float64 tensors, integrated there, and the results are copied back:
    the caller gets NumPy arrays as without the block (this is how ``riemattn simulate --device``
    and ``riemattn reproduce --device`` run the same code on a GPU). Tensors passed in are used
    as they are. None leaves the setting unchanged.
    """
    if device is None:
        yield
        return
    token = _DEVICE.set(None if check_device(device) == "cpu" else str(device))
    try:
        yield
    finally:
        _DEVICE.reset(token)


def default_device():
    """The device set by :func:`use_device` for NumPy inputs (None: compute with NumPy)."""
    return _DEVICE.get()
