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
field kernels) and the modules of ``solvers/compiled/`` with compiled code (the loops). Compiled code
of the engine uses :data:`jit` (``numba.njit(cache=True, nogil=True)``) from this module, which
installs the stamp first.

This uses numba's cache-locator classes (``numba.core.caching``, not a public API; numba is
pinned to a tested range in setup.cfg). If they are not found, numba's own per-file stamps are
used (and :data:`INSTALLED` is False).

Where no cache directory can be written (a read-only install with no writable ``HOME``,
``XDG_CACHE_HOME`` or ``NUMBA_CACHE_DIR``: numba's locators all refuse), the engine's functions
are compiled without a cache (:data:`CACHED` is False, one message on the ``riemattn`` logger):
``engine="compiled"`` still runs (compiling in every process), ``"auto"`` keeps to the NumPy
engine. :func:`cached_for_this_cpu` says whether a function's cache holds code for this CPU
(numba keys each entry by the CPU name and features: a cache built for another CPU does not count).

Processes that compile at the same time (pytest-xdist, Dask workers) share the cache. numba's own
save reads the function's index, gives a new signature the first free data file number and writes
the index back, unlocked: two processes saving different signatures at once could both take
number 1, and the index could then name, for one signature, the file holding the other's machine
code -- loaded later without a check (a wrong result or a crash; numba issues 4807 and 10128).
The engine's functions save under a file lock in their cache directory (:class:`LockedIndex`:
the index is re-read inside the lock, and the data is written before the index names it).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
from pathlib import Path

import numba as nb

ROOT = Path(__file__).resolve().parents[2]  # the riemattn package
#: the files whose code numba compiles, or whose constants it freezes into compiled code (the
#: compiled engine's pure-Python modules -- _engine, _dispatch, _tables, _warmup -- are not: editing
#: them recompiles nothing; tests/solvers/test_compiled_user.py checks that every module with compiled code is here)
PATTERNS = ("dynamics/kernels/*.py",
            *(f"solvers/compiled/{name}.py" for name in ("_adaptive", "_events", "_fixed", "_interp", "_kernel",
                                                         "_lanes", "_rosenbrock", "_steps")))


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

#: Whether the engine's compiled code is cached on disk (False: no writable cache directory).
CACHED = True
NO_CACHE = ("no writable cache directory for numba (the package directory, NUMBA_CACHE_DIR and the user "
            "cache directory are read-only or unset): the compiled engine compiles in every process and "
            "engine='auto' keeps to the NumPy engine; set NUMBA_CACHE_DIR to a writable directory to cache it")


try:
    import fcntl
except ImportError:  # Windows: no lock (the saves there are numba's own)
    fcntl = None

#: the lock file of the index saves, in each cache directory
INDEX_LOCK = "riemattn-index.lock"


class LockedIndex:
    """Mixin for numba's ``IndexDataCacheFile``: :meth:`save` under an exclusive ``flock`` of
    :data:`INDEX_LOCK` in the cache directory, with the index read inside the lock (so a new
    signature takes a data file no other process has taken) and the data written before the index
    names it (a reader never finds an entry whose file holds something else)."""

    def save(self, key, data):
        lock = None
        if fcntl is not None:
            try:
                lock = open(os.path.join(self._cache_path, INDEX_LOCK), "a")  # noqa: SIM115 -- closed below
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            except OSError:  # no lock file here: save as numba does
                if lock is not None:
                    lock.close()
                lock = None
        try:
            overloads = self._load_index()
            name = overloads.get(key)
            if name is None:
                taken = set(overloads.values())
                name = next(n for n in map(self._data_name, itertools.count(1)) if n not in taken)
            self._save_data(name, data)
            overloads[key] = name
            self._save_index(overloads)
        finally:
            if lock is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
                lock.close()


@functools.lru_cache(maxsize=None)
def _locked_class(cls):
    return type("Locked" + cls.__name__, (LockedIndex, cls), {})


def njit(**options):
    """``numba.njit(cache=True, nogil=True, **options)``, or without ``cache`` where numba finds no
    writable cache directory for the function (then :data:`CACHED` becomes False, logged once).
    The function's cache saves under the lock of :class:`LockedIndex`."""

    def decorate(fn):
        global CACHED
        try:
            disp = nb.njit(cache=True, nogil=True, **options)(fn)
            cache_file = getattr(getattr(disp, "_cache", None), "_cache_file", None)
            if cache_file is not None and hasattr(cache_file, "_load_index"):
                cache_file.__class__ = _locked_class(type(cache_file))
            return disp
        except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
            if "no locator" not in str(exc):
                raise
            if CACHED:
                logging.getLogger("riemattn").warning("riemattn: %s.", NO_CACHE)
            CACHED = False
            return nb.njit(nogil=True, **options)(fn)

    return decorate


#: The decorator of every compiled function of the engine.
jit = njit()
#: ... of one whose code numba inlines into each caller (its IR, before typing: arguments that are
#: constants in a caller become constants in the inlined code)
jit_inline = njit(inline="always")


def cache_dir(dispatcher):
    """The directory of a compiled function's on-disk cache, or None (not cached, numba's JIT off)."""
    cache = getattr(dispatcher, "_cache", None)
    return getattr(cache, "cache_path", None)


def this_cpu():
    """numba's key of the code it generates here: (target triple, CPU name, CPU features)."""
    from numba.core.registry import cpu_target

    return cpu_target.target_context.codegen().magic_tuple()


def cached_for_this_cpu(dispatcher) -> bool:
    """Whether ``dispatcher`` (a numba function) has compiled code for this CPU: compiled in this
    process, or in its on-disk cache index under this CPU's key (entries for another CPU, e.g.
    ``NUMBA_CPU_NAME=generic`` or another machine sharing the cache, do not count; a stale index,
    after a change of the engine's sources, is empty)."""
    if getattr(dispatcher, "signatures", None):
        return True
    try:
        index = dispatcher._cache._cache_file._load_index()
        cpu = this_cpu()
        return any(key[1] == cpu for key in index)
    except Exception:  # noqa: BLE001 -- no cache, or a numba without these internals: not ready
        return False
