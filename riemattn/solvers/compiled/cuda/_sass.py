"""The step loop of a kernel in its SASS (``nvdisasm -c`` output), for the proxy figures (private).

:func:`largest_loop` builds the control-flow graph of the kernel's entry function (basic blocks cut
at labels and after branches, exits and returns; edges to branch targets and to the next block
unless the block ends in an unconditional branch, exit or return), finds its strongly connected
components (Tarjan) and takes the one with the most instructions: the outermost loop, which in the
engine's kernels is the solve's step loop (every step attempt runs through it). Subroutines the
compiler keeps out of line (``$__internal_...``: the f64 division and square root slow paths) are
reached by CALL only, so they are not part of the loop; the calls in the loop are counted.
"""

from __future__ import annotations

import re
import sys

_INSN = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+|\$[^:\s]+):\s*$")
_TARGET = re.compile(r"`\(([^)]+)\)")
_MEM = ("LDL", "STL", "LDG", "STG", "LD", "ST", "LDS", "STS")  # LD/ST: generic (the space known at run time
#                                                             only); LDS/STS: shared memory


def _entry_lines(text):
    """The lines of the first function section (the kernel entry and its out-of-line subroutines)."""
    out, started = [], False
    for line in text.splitlines():
        if line.startswith("\t.section") or line.startswith("//----"):
            if started and out:
                break
            continue
        if _INSN.match(line):
            started = True
        if started:
            out.append(line)
    return out


def _blocks(lines):
    """Basic blocks: [(label or None, [(opcode, text), ...])]."""
    blocks, cur, label = [], [], None
    for line in lines:
        m = _LABEL.match(line.strip())
        if m:
            if cur or label is not None:
                blocks.append((label, cur))
            cur, label = [], m.group(1)
            continue
        m = _INSN.match(line)
        if not m:
            continue
        body = m.group(2)
        cur.append(body)
        op = _opcode(body)
        if op.startswith(("BRA", "EXIT", "RET", "BRX", "JMP", "JMX")):
            blocks.append((label, cur))
            cur, label = [], None
    if cur or label is not None:
        blocks.append((label, cur))
    return blocks


def _opcode(body):
    parts = body.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def _edges(blocks):
    index = {label: i for i, (label, _) in enumerate(blocks) if label is not None}
    succ = []
    for i, (_, insns) in enumerate(blocks):
        out = []
        last = insns[-1] if insns else ""
        op = _opcode(last)
        predicated = last.startswith("@")
        if op.startswith(("BRA", "BRX", "JMP", "JMX")):
            m = _TARGET.search(last)
            if m and m.group(1) in index:
                out.append(index[m.group(1)])
            if (predicated or ".DIV" in op) and i + 1 < len(blocks):
                out.append(i + 1)
        elif op.startswith(("EXIT", "RET")):
            if predicated and i + 1 < len(blocks):
                out.append(i + 1)
        elif i + 1 < len(blocks) and not (blocks[i + 1][0] or "").startswith("$"):
            out.append(i + 1)
        succ.append(out)
    return succ


def _sccs(succ):
    """Tarjan's strongly connected components (recursive; the graphs have a few thousand blocks)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(succ) + 1000))
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    for v in range(len(succ)):
        if v not in index:
            visit(v)
    return comps


def _count(insns):
    c = dict.fromkeys(_MEM, 0)
    c["calls"] = 0
    for body in insns:
        op = _opcode(body)
        head = op.split(".")[0]
        if head in c:
            c[head] += 1
        elif head == "CALL":
            c["calls"] += 1
    return c


def largest_loop(text):
    """{"instructions" (the entry function, subroutines excluded), "loop" (its largest loop's),
    "LDL", "STL", "LDG", "STG", "LD", "ST" (generic), "LDS", "STS" (shared), "calls" (in that loop), "STG_outside"
    (STG of the entry outside it)}."""
    blocks = _blocks(_entry_lines(text))
    main = []  # the entry function's blocks: up to the first out-of-line subroutine
    for label, insns in blocks:
        if label is not None and label.startswith("$"):
            break
        main.append((label, insns))
    succ = _edges(main)
    comps = [c for c in _sccs(succ) if len(c) > 1 or c[0] in succ[c[0]]]
    size = lambda comp: sum(len(main[v][1]) for v in comp)  # noqa: E731
    loop = max(comps, key=size) if comps else []
    inside = set(loop)
    loop_insns = [b for v in sorted(inside) for b in main[v][1]]
    out_insns = [b for v in range(len(main)) if v not in inside for b in main[v][1]]
    res = dict(instructions=sum(len(i) for _, i in main), loop=len(loop_insns))
    res.update(_count(loop_insns))
    res["STG_outside"] = _count(out_insns)["STG"]
    return res
