"""numba's on-disk cache for the compiled engine, keyed on ALL of the engine's sources (private).

numba caches a compiled function with a stamp of the one file that defines it. A compiled
function also contains the code of the jitted functions it calls (numba links and inlines them),
so after an edit of ``_kernel_attention.py`` the cached ``kernels.evaluate`` -- and every cached
compiled loop that calls it -- would silently keep the old code, and so would a cache left
behind by a package upgrade that did not change the caller's file. Here the functions of the
engine's files get a stamp hashed from every one of those files: any change of any of them
invalidates the whole engine's cache (a recompilation of a few seconds), and nothing stale is
ever loaded.

The engine's files (:data:`PATTERNS`, relative to the package): ``dynamics/kernels/*.py`` (the
field kernels) and ``solvers/compiled/**/*.py`` (the compiled loops). Compiled code
of the engine uses :data:`jit` (``numba.njit(cache=True, nogil=True)``) from this module, which
installs the stamp first.

This uses numba's cache-locator classes (``numba.core.caching``, not a public API; numba is
pinned to a tested range in setup.cfg). If they are not found, numba's own per-file stamps are
used (and :data:`INSTALLED` is False).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba as nb

ROOT = Path(__file__).resolve().parents[2]  # the riemattn package
PATTERNS = ("dynamics/kernels/*.py", "solvers/compiled/**/*.py")


@functools.lru_cache(maxsize=8)
def engine_sources(root: Path = ROOT) -> list[Path]:
    """The engine's source files, sorted."""
    files = set()
    for pattern in PATTERNS:
        files.update(p.resolve() for p in root.glob(pattern))
    return sorted(files)


@functools.lru_cache(maxsize=8)
def _stamp(keys: tuple) -> bytes:
    h = hashlib.sha256()
    for name, path, _mtime, _size in keys:
        h.update(name.encode())
        h.update(Path(path).read_bytes())
    return h.digest()


def engine_stamp(root: Path = ROOT) -> bytes:
    """SHA-256 of the engine's files (names relative to the package, and contents)."""
    keys = []
    for p in engine_sources(root):
        st = p.stat()
        keys.append((str(p.relative_to(root.resolve())), str(p), st.st_mtime_ns, st.st_size))
    return _stamp(tuple(keys))


class _EngineStamp:
    """Locator mixin: applies to the engine's files only; their stamp is :func:`engine_stamp`."""

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            path = Path(py_file).resolve()
        except (OSError, ValueError):
            return None
        if path not in _SOURCES:
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        return engine_stamp()


def _install() -> bool:
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    bases = [getattr(caching, name, None) or getattr(caching, "_" + name, None)
             for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")]
    if impl is None or any(b is None for b in bases) or not hasattr(impl, "_locator_classes"):
        return False
    current = impl._locator_classes
    if any(issubclass(c, _EngineStamp) for c in current):
        return True
    ours = [type("Engine" + b.__name__.lstrip("_"), (_EngineStamp, b), {}) for b in bases]
    impl._locator_classes = ours + list(current)
    return True


_SOURCES = frozenset(engine_sources())

#: Whether the engine-wide stamp is in use (numba's locator classes were found).
INSTALLED = _install()

#: The decorator of every compiled function of the engine.
jit = nb.njit(cache=True, nogil=True)
