"""The console of the command line (issue 34, item 8): at most two lines per figure (``--verbose``:
the claims too), no line longer than 200 characters; an unwritable or invalid ``--out`` is one
error line and a non-zero exit for every subcommand, before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from riemattn.cli import main
from riemattn.cli._console import WIDTH, figure_lines, one_line, report

ROOT = Path(__file__).resolve().parents[2]


def _lines(captured):
    return [line for stream in (captured.out, captured.err) for line in stream.splitlines()]


def test_reproduce_prints_two_lines_per_figure_at_most_and_the_claims_with_verbose(tmp_path, capsys):
    names = ["arxiv-fig2", "glpr-equiangular"]
    assert main(["reproduce", *names, "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    lines = _lines(capsys.readouterr())
    assert len(lines) <= 2 * len(names) + 1 and all(len(line) <= WIDTH for line in lines), lines
    for name in names:
        assert sum(line.startswith(f"PASS {name} ") for line in lines) == 1
    assert "summary.json" in lines[-1] and "--verbose" in lines[-1]
    # the numbers are in summary.json; --verbose (from the cache: no recomputation) prints each claim
    claims = json.loads((tmp_path / names[0] / "summary.json").read_text())["claims"]
    assert main(["reproduce", *names, "--quick", "--out", str(tmp_path), "--no-progress", "--verbose"]) == 0
    verbose = _lines(capsys.readouterr())
    assert all(len(line) <= WIDTH for line in verbose)
    assert any("(cached)" in line for line in verbose)
    for cname in claims:
        assert any(f"] {cname}: " in line for line in verbose), cname


def test_formatter_puts_long_claims_and_errors_on_one_short_line():
    """A claim whose observation is 4 900 characters of decoded text with newlines (as icml-gpt's
    was), a multi-line error, the verdict line: each one line of at most WIDTH characters."""
    text = ("The quick brown fox\njumps over the lazy dog. " * 200)[:4900]
    summary = {
        "name": "fake-gpt", "runtime_s": 1.25, "cached": False,
        "claims": {
            "decoded": {"status": None, "kind": "observation", "value": list(range(500)), "description": "text",
                        "observed": text},
            **{f"claim-{i}-{'x' * 80}": {"status": "not checked at this size", "kind": "paper", "value": 1.0,
                                         "description": "d " * 300, "reason": "r\n" * 100} for i in range(6)},
        },
    }
    v, lines = figure_lines(summary, "results")
    assert v == "PARTIAL" and len(lines) == 1 and len(lines[0]) <= WIDTH and lines[0].endswith("...")
    v, lines = figure_lines(summary, "results", verbose=True)
    assert len(lines) == 8 and all(len(line) <= WIDTH and "\n" not in line for line in lines)
    failed = {"name": "fake", "error": "RuntimeError: boom\n" + "  File 'x.py', line 1\n" * 300, "claims": {}}
    v, lines = figure_lines(failed, "results")
    assert v == "FAIL" and len(lines) == 2 and lines[1].startswith("    error: RuntimeError: boom File")
    assert all(len(line) <= WIDTH for line in lines)
    printed = []
    assert report([summary, failed], "results", print_=printed.append) == 1
    assert len(printed) == 1 + 2 + 1 and all(len(line) <= WIDTH for line in printed)
    assert one_line("a\n\n  b\tc") == "a b c" and one_line("x" * 300, width=10) == "xxxxxxx..."


# ----------------------------------------------------------------------------------------------
# --out that cannot be written: one line, exit 2, before any work
_NO_PROC = not Path("/proc/self").is_dir()
_SWEEP = ROOT / "examples" / "phase_diagram_sweep.toml"
_SIMULATE = ROOT / "examples" / "two_heads_ellipsoid.toml"


@pytest.mark.skipif(_NO_PROC, reason="needs /proc (Linux), where even root cannot make a file")
@pytest.mark.parametrize("out", ["/proc/riemattn-x", "/proc/riemattn-x/y", "/proc"])
@pytest.mark.parametrize("command", [
    ["reproduce", "arxiv-fig2", "--quick", "--no-progress"],
    ["simulate", str(_SIMULATE), "--no-progress"],
    ["sweep", str(_SWEEP), "--no-progress"],
    ["loop", "--passes", "1", "--no-progress"],
], ids=lambda c: c[0] if isinstance(c, list) else c)
def test_unwritable_out_is_one_error_line(command, out, capsys, monkeypatch):
    import riemattn.experiments._runner as runner
    import riemattn.runs.simulate as simulate

    def no_work(*args, **kwargs):
        raise AssertionError("work started before --out was checked")

    monkeypatch.setattr(runner, "run_one", no_work)
    monkeypatch.setattr(simulate, "simulate_config", no_work)
    code = main([*command, "--out", out])
    captured = capsys.readouterr()
    lines = _lines(captured)
    assert code == 2 and len(lines) == 1, lines
    assert "error:" in lines[0] and "--out" in lines[0] and out in lines[0] and "Traceback" not in captured.err


@pytest.mark.skipif(_NO_PROC, reason="needs /proc (Linux)")
def test_sweep_plot_unwritable_out_is_one_error_line(tmp_path, capsys):
    assert main(["sweep-plot", str(tmp_path / "none.zarr"), "--var", "x", "--out", "/proc/riemattn-x/f.png"]) == 2
    lines = _lines(capsys.readouterr())
    assert len(lines) == 1 and "riemattn: error:" in lines[0] and "--out" in lines[0]
