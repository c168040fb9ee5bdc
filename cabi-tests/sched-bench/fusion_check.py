#!/usr/bin/env python3
"""Which of ggml-cuda's fusable runs a graph's memory layout forbids.

    fusion_check.py GRAPHS.txt...

Reads the graphs backend_trace.c writes with BACKEND_TRACE_GRAPHS=FILE (every tensor with its
buffer, offset and size) and, for each distinct graph (by node count), finds the runs of
nodes ggml-cuda fuses into one kernel in a decode graph of a dense model:

- MUL_MAT, MUL_MAT, GLU (the up and gate products and their GLU),
- RMS_NORM, MUL (a norm and its weight),

and counts those whose output overlaps an input from outside the run (the check of
`ggml_cuda_check_fusion_memory_ranges`: such a run is computed unfused). Only the memory
layout is checked, not ggml-cuda's other conditions (types, shapes, use counts), which are the
same in two arms that place the same nodes. Stock's own layout blocks some runs too (a final
norm computed in place over its input, for one), so compare an arm's counts with stock's for
the same graphs. Exit status 2 on a missing argument, else 0.
"""

import re
import sys

LINE = re.compile(r"(\d+) (\S+) flags (\d+) uses (-?\d+) ne \S+ view (-?\d+) at (\S+) src ?(.*)")


def place(text):
    """(buffer, start, end) of `B:OFFSET+BYTES`, or None for `-`."""
    if text == "-":
        return None
    buf, rest = text.split(":")
    off, size = rest.split("+")
    return (int(buf), int(off), int(off) + int(size))


def read_graphs(path):
    """Each graph: a list of nodes (op, place, sources); a source is ("node", index) or
    ("outside", place)."""
    graphs, nodes = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("graph"):
                nodes = []
                graphs.append(nodes)
                continue
            m = LINE.match(line.strip())
            if not m or nodes is None:
                continue
            _, op, _, _, _, at, srcs = m.groups()
            sources = [("outside", place(t[2:])) if t.startswith("x=") else ("node", int(t))
                       for t in srcs.split()]
            nodes.append((op, place(at), sources))
    return graphs


def overlaps(a, b):
    return a is not None and b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def blocked(nodes, run):
    """Whether the output of the run's last node overlaps an input from outside the run."""
    out = nodes[run[-1]][1]
    for i in run:
        for kind, what in nodes[i][2]:
            where = what if kind == "outside" else (None if what in run else nodes[what][1])
            if overlaps(out, where):
                return True
    return False


def runs(nodes):
    """(name, node indexes) of every candidate run."""
    for i, (op, _, _) in enumerate(nodes):
        if "GLU" in op and i >= 2 and nodes[i - 1][0] == "MUL_MAT" and nodes[i - 2][0] == "MUL_MAT":
            yield "MUL_MAT,MUL_MAT,GLU", (i - 2, i - 1, i)
        if op == "MUL" and i >= 1 and nodes[i - 1][0] == "RMS_NORM" and ("node", i - 1) in nodes[i][2]:
            yield "RMS_NORM,MUL", (i - 1, i)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        seen = set()
        for nodes in read_graphs(path):
            if len(nodes) in seen:
                continue
            seen.add(len(nodes))
            counts = {}
            for name, run in runs(nodes):
                total, bad = counts.get(name, (0, 0))
                counts[name] = (total + 1, bad + int(blocked(nodes, run)))
            for name, (total, bad) in sorted(counts.items()):
                print(f"{path}: graph of {len(nodes)} nodes: {name}: {bad} of {total} blocked by the layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
