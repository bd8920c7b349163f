"""What ``riemattn reproduce`` prints: at most two lines per figure, none longer than :data:`WIDTH`.

By default each figure gets its verdict line (``PASS``/``PARTIAL``/``FAIL``, name, runtime, output
directory and, unless PASS, which paper claims were not reproduced or not checked) and, if it
failed with an error, one line with the error. ``--verbose`` adds one line per claim. Every line
is one line (newlines and runs of whitespace in claims, values and errors -- decoded model text,
tracebacks -- become single spaces) of at most :data:`WIDTH` characters, cut with ``...``; the
full claims, their values and the error are in the figure's ``summary.json``.
"""

from __future__ import annotations

import os

#: the longest line the report prints
WIDTH = 200

#: the mark of a claim line in the verbose report, by status
MARKS = {"reproduced": "reproduced", "not reproduced": "NOT REPRODUCED",
         "not checked at this size": "not checked at this size"}


def one_line(text, width: int = WIDTH, indent: str = "") -> str:
    """``indent`` and ``text`` (any object, via ``str``) on one line of at most ``width`` characters.

    Whitespace runs, newlines included, become one space; a longer text is cut and ends in ``...``.
    """
    text, room = " ".join(str(text).split()), width - len(indent)
    return indent + (text if len(text) <= room else text[: room - 3].rstrip() + "...")


def figure_lines(summary: dict, out, *, verbose: bool = False) -> tuple[str, list[str]]:
    """``(verdict, lines)`` of one figure's summary: the lines the CLI prints for it."""
    from ..experiments._verdict import normalize, summarize_verdict, verdict

    claims = normalize(summary.get("claims") or {})
    v, detail = verdict(claims, summary.get("error"))
    if summary.get("cached"):
        took = " (cached)"
    elif "runtime_s" in summary:
        took = f" ({summary.get('runtime_s', 0):.1f} s)"
    else:
        took = ""
    # the count is of paper claims only: identities, stand-ins and observations are reported by --verbose
    note = "" if "error" in summary else f": {summarize_verdict(v, detail, limit=3)}"
    lines = [one_line(f"{v} {summary['name']}{took} -> {os.path.join(out, summary['name'])}{note}")]
    if "error" in summary:
        lines.append(one_line(f"error: {summary['error']}", indent="    "))
    if verbose:
        for name, c in claims.items():
            if c["kind"] == "observation":  # a number reported, no claim attached
                text = f"[obs] {name}: {c['description']}: {c.get('observed')} (value {c['value']})"
            else:
                label = f"{c['kind']} " if c["kind"] in ("stand-in", "identity") else ""
                why = f"; {c['reason']}" if c.get("reason") else ""
                text = f"[{label}{MARKS[c['status']]}] {name}: {c['description']} (value {c['value']}{why})"
            lines.append(one_line(text, indent="    "))
    return v, lines


def report(summaries, out, *, verbose: bool = False, print_=print) -> int:
    """Print every figure's lines (:func:`figure_lines`) and, unless ``verbose``, one closing line
    saying where the claims are; 1 if a figure FAILs, else 0 (PARTIAL is a result, not an error)."""
    failed = 0
    for s in summaries:
        v, lines = figure_lines(s, out, verbose=verbose)
        failed += v == "FAIL"
        for line in lines:
            print_(line)
    if summaries and not verbose:
        print_(one_line(f"claims and their numbers: {os.path.join(out, 'NAME', 'summary.json')}; "
                        "--verbose prints them"))
    return 1 if failed else 0
