"""The compiled engine's on-disk cache shared by processes that compile at the same time
(riemattn.dynamics.kernels._kernel_cache): each signature loads its own machine code."""

import os
import subprocess
import sys
import textwrap

import pytest

from riemattn.dynamics.kernels import _kernel_cache
from _subprocess import repo_env

MODULE = '''
from riemattn.dynamics.kernels._kernel_cache import njit


@njit()
def plus_one(x):
    return x + 1
'''

# Both processes enter numba's save together (a file barrier), then sleep inside it so that, unlocked,
# the "int" process writes the index first and its data last: the index names file 1 for float64 and
# file 1 holds the int64 code (what numba's own save gives here: plus_one(3.5) == 4).
CHILD = '''
import os, sys, time
from numba.core import caching

me, other, slow_index, slow_data = sys.argv[1:5]
barrier = os.environ["BARRIER"]
save_index, save_data = caching.IndexDataCacheFile._save_index, caching.IndexDataCacheFile._save_data
save_overload = caching.Cache._save_overload


def slow_save_index(self, overloads):
    time.sleep(float(slow_index))
    return save_index(self, overloads)


def slow_save_data(self, name, data):
    time.sleep(float(slow_data))
    return save_data(self, name, data)


def together(self, sig, data):
    open(os.path.join(barrier, me), "w").close()
    t0 = time.time()
    while not os.path.exists(os.path.join(barrier, other)) and time.time() - t0 < 60:
        time.sleep(0.005)
    return save_overload(self, sig, data)


caching.IndexDataCacheFile._save_index = slow_save_index
caching.IndexDataCacheFile._save_data = slow_save_data
caching.Cache._save_overload = together
import racer
print(racer.plus_one(3 if me == "int" else 3.5))
'''

LOAD = "import racer; print(racer.plus_one(3), racer.plus_one(3.5))"


@pytest.mark.skipif(_kernel_cache.fcntl is None, reason="no fcntl (Windows): numba's own saves")
def test_processes_compiling_together_each_load_their_own_code(tmp_path):
    (tmp_path / "racer.py").write_text(MODULE)
    (tmp_path / "child.py").write_text(textwrap.dedent(CHILD))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = repo_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"), BARRIER=str(barrier))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    runs = [subprocess.Popen([sys.executable, str(tmp_path / "child.py"), me, other, si, sd], env=env, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for me, other, si, sd in (("int", "float", "0.2", "1.5"), ("float", "int", "0.8", "0.1"))]
    outs = [r.communicate(timeout=240) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.split() for out, _ in outs] == [["4"], ["4.5"]]  # each compiled its own
    fresh = subprocess.run([sys.executable, "-c", LOAD], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=240)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.split() == ["4", "4.5"]  # loaded from the cache: each signature its own code
    assert (tmp_path / "cache").is_dir()
