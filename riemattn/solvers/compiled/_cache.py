"""numba's on-disk cache for the compiled engine, keyed by all of the engine's compiled code.

numba keys a cached function by the content of its own source file only, but a cached loop holds
the machine code of every function it calls (the field kernels, the steps): after an edit of a
kernel, the loops would load stale code. :func:`install` puts numba cache locators in front of
numba's own for the engine's files (``riemattn/solvers/compiled/*.py`` and the field kernels
``riemattn/dynamics/kernels.py``, ``riemattn/dynamics/_kernel*.py``) whose source stamp is a hash
of all of those files: any edit of any of them invalidates every cached loop. Everything else
(the cache directory, ``NUMBA_CACHE_DIR``) is numba's.
"""

from __future__ import annotations

import glob
import hashlib
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(os.path.dirname(_HERE))


_FILES: list = []


def engine_files() -> list:
    """The engine's files that hold compiled code (those that mention numba's ``njit``), and the
    one that chooses the kernels."""
    if not _FILES:
        files = glob.glob(os.path.join(_HERE, "*.py"))
        files += glob.glob(os.path.join(_PACKAGE, "dynamics", "kernels.py"))
        files += glob.glob(os.path.join(_PACKAGE, "dynamics", "_kernel*.py"))
        for f in sorted(os.path.abspath(f) for f in files):
            with open(f, "rb") as fh:
                text = fh.read()
            if b"njit" in text or f.endswith(os.sep + "_kernel.py"):
                _FILES.append(f)
    return _FILES


_STAMP: list = []


def engine_stamp() -> str:
    """A hash of the engine's source files (computed once per process)."""
    if not _STAMP:
        h = hashlib.sha256()
        for f in engine_files():
            h.update(f.encode())
            with open(f, "rb") as fh:
                h.update(fh.read())
        _STAMP.append(h.hexdigest())
    return _STAMP[0]


def _ours(py_file) -> bool:
    return os.path.abspath(py_file) in engine_files()


def install():
    """Register the locators (once): numba consults them first for the engine's functions."""
    from numba.core import caching

    impl = caching.CacheImpl
    if any(getattr(c, "_riemattn", False) for c in impl._locator_classes):
        return
    made = []
    for base in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator):
        def from_function(cls, py_func, py_file, _base=base):
            if not _ours(py_file):
                return None
            return super(cls, cls).from_function.__func__(cls, py_func, py_file)

        made.append(type(f"Riemattn{base.__name__}", (base,), {
            "_riemattn": True,
            "get_source_stamp": lambda self: engine_stamp(),
            "from_function": classmethod(from_function),
        }))
    impl._locator_classes[:0] = made
