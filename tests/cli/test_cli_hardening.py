"""Issue 14, the command line: every user mistake (a bad option, a wrongly typed or out-of-range
TOML value, an output path that cannot be written, a directory given as the config) is one line
``riemattn: error: ...`` with exit status 2, found before any work; never a traceback.
"""

from __future__ import annotations

import json

import pytest

import riemattn
from riemattn.cli import main

# ---------------------------------------------------------------------------------------------
# simulate: the TOML schema and the paths, checked before any work


def _simulate(tmp_path, text, capsys, out=None):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text + "\n")
    out = tmp_path / "out" if out is None else out
    code = main(["simulate", str(cfg), "--out", str(out), "--no-progress"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "text, words",
    [
        # the examples: a clear error, never a traceback
        ('tokens = "ten"', ["tokens", "integer", "'ten'", "string"]),
        ("seed = 1.5", ["seed", "integer", "1.5", "float"]),
        ("[manifold]\nW_cond = 0", ["manifold.W_cond", ">= 1", "got 0"]),
        ("[integration]\nsaves = 0", ["integration.saves", ">= 2", "got 0"]),
        # rejected, not truncated
        ("tokens = 2.7", ["tokens", "integer", "2.7"]),
        ("tokens = true", ["tokens", "integer", "true", "boolean"]),
        # saves = 1 would ignore t1: rejected (documented)
        ("[integration]\nsaves = 1", ["integration.saves", ">= 2", "t1", "got 1"]),
        # more of the same classes
        ("trajectories = 0", ["trajectories", ">= 1", "got 0"]),
        ("d = 1", ["d", ">= 2", "got 1"]),
        ("seed = -1", ["seed", ">= 0", "got -1"]),
        ("[attention]\nheads = 1.0", ["attention.heads", "integer", "1.0"]),
        ("[attention]\nbeta = 'hot'", ["attention.beta", "number", "'hot'"]),
        ("[attention]\nbeta = nan", ["attention.beta", "finite", "nan"]),
        ("[attention]\nP_scale = -1", ["attention.P_scale", ">= 0", "-1"]),
        ("[attention]\nP = [[1, 2], [3]]", ["attention.P", "different lengths"]),
        ("[attention]\nP = [[1, 0, 0], [0, true, 0], [0, 0, 1]]", ["attention.P", "numbers", "true"]),
        ("[attention]\nP = 3", ["attention.P", "matrix", "got 3"]),
        ("[attention]\nU = 'spd '", ["attention.U", "spd"]),
        ("[manifold]\nkind = 'ellipsoid'\nW = [[1, 0, 0], [0, 1, 0], [0, 0, -1]]", ["manifold.W", "positive definite"]),
        ("[integration]\nt1 = 0", ["integration.t1", "positive", "got 0"]),
        ("[integration]\nt1 = inf", ["integration.t1", "finite", "inf"]),
        ("[integration]\nrtol = '1e-6'", ["integration.rtol", "number", "string"]),
        ("[integration]\nstepper = 4", ["integration.stepper", "rk4", "got 4"]),
        ("manifold = 'sphere'", ["manifold", "table", "'sphere'"]),
        ("tokens = {n = 3}", ["tokens", "not a table"]),
    ],
)
def test_simulate_schema_errors_are_one_line(tmp_path, capsys, text, words):
    code, err = _simulate(tmp_path, text, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("riemattn: error: "), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not (tmp_path / "out").exists()  # nothing written, nothing created


def test_simulate_schema_is_checked_before_the_out_path_and_before_any_work(tmp_path, capsys, monkeypatch):
    import riemattn.runs.simulate as sim

    def no_work(*args, **kwargs):
        raise AssertionError("the simulation ran")

    monkeypatch.setattr(sim, "integrate", no_work)
    code, err = _simulate(tmp_path, "tokens = 2.7", capsys, out=tmp_path / "c.toml")
    assert code == 2 and "tokens" in err


def test_simulate_out_is_a_file_fails_at_once(tmp_path, capsys, monkeypatch):
    import riemattn.runs.simulate as sim

    monkeypatch.setattr(sim, "integrate", lambda *a, **k: pytest.fail("the simulation ran"))
    afile = tmp_path / "taken"
    afile.write_text("x")
    code, err = _simulate(tmp_path, "tokens = 3", capsys, out=afile)
    assert code == 2 and "--out" in err and "is a file" in err and str(afile) in err
    code, err = _simulate(tmp_path, "tokens = 3", capsys, out=afile / "below")
    assert code == 2 and "--out" in err and "is a file" in err


def test_simulate_config_is_a_directory(tmp_path, capsys):
    assert main(["simulate", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "does not exist" not in err


def test_simulate_config_not_utf8(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"seed = 1\n# \xff\xfe\n")
    assert main(["simulate", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "UTF-8" in capsys.readouterr().err


def test_simulate_accepts_integers_for_numbers_and_a_list_of_head_matrices(tmp_path, capsys):
    text = """
tokens = 3
trajectories = 1
[attention]
heads = 2
P = [[[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[0, 1, 0], [1, 0, 0], [0, 0, 1]]]
beta = 1
[integration]
t1 = 1
saves = 2
stepper = "euler"
dt = 0.1
"""
    code, err = _simulate(tmp_path, text, capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["config"]["attention"]["heads"] == 2 and summary["success"]


def test_validate_config_api_raises_the_package_errors():
    from riemattn.errors import InputTypeError, ValidationError
    from riemattn.runs.simulate import validate_config

    with pytest.raises(InputTypeError, match="tokens"):
        validate_config({"tokens": "ten"})
    with pytest.raises(ValidationError, match="saves"):
        validate_config({"integration": {"saves": 1}})
    given = {"tokens": 3}
    cfg = validate_config(given)
    assert cfg["tokens"] == 3 and cfg["d"] == 3 and given == {"tokens": 3}


# ---------------------------------------------------------------------------------------------
# the parser


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"riemattn {riemattn.__version__}"


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_workers_must_be_a_positive_integer(capsys, value, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "glpr-equiangular", "--workers", value, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("riemattn: error: argument --workers")
    assert repr(value) in err[0] and ">= 1" in err[0]
    assert not any(tmp_path.iterdir())


def test_bad_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "--frobnicate"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("riemattn: error: ") and "--frobnicate" in err[0]
