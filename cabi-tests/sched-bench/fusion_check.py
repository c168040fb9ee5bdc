#!/usr/bin/env python3
"""Which of ggml-cuda's fusable runs a graph's memory layout forbids.

    fusion_check.py GRAPHS.txt...
    fusion_check.py --compare [--window K] [--backend NAME] A.txt B.txt
    fusion_check.py --self-test

Reads the graphs backend_trace.c writes with BACKEND_TRACE_GRAPHS=FILE (every tensor with its
buffer, offset and size). ggml-cuda runs several nodes as one kernel only when the run's output
overlaps no source of the run that comes from outside it
(`ggml_cuda_check_fusion_memory_ranges`: sources of op NONE, weights and inputs, are not
checked; a source is inside the run when it is an earlier node of the run). Such a run is
computed unfused.

The first form counts, for each distinct graph (by node count), the runs ggml-cuda fuses in a
decode graph of a dense model whose layout forbids the fusion:

- MUL_MAT, MUL_MAT, GLU (the up and gate products and their GLU),
- RMS_NORM, MUL, ROPE (a norm, its weight and the rotation of Q or K).

(RMS_NORM, MUL and RMS_NORM, MUL, ADD, which it fuses more often, it fuses without that
check.) Only the memory layout is checked, not ggml-cuda's other conditions (types, shapes,
use counts), which are the same in two arms that place the same nodes. Stock's own layout can
block runs too, so compare an arm's counts with stock's for the same graphs.

`--compare` checks every run of 2 to K consecutive nodes (default 12; ggml-cuda's longest
runs, MoE routing with every option and the NVFP4 scaled GLU, reach 13) with its last node
as the output, in each of B's graphs and in A's graph of the same ops and shapes, and lists
the runs whose fusion B's layout forbids and A's allows, with their ops, and the other way
round. Any run counts, fusable or not: what matters is where B forbids more than A. A graph
of B that A never computed is named and counts as a failure (the arms did not place the
same graphs). `--backend NAME` keeps only the graphs the tracer wrote for that backend
(CUDA0: a CPU split's layout fuses nothing).

Exit status 2 on a bad argument, 1 when `--compare` finds a run B forbids and A allows, a
graph A lacks, or no graph of B at all, else 0.
"""

import os
import re
import sys

LINE = re.compile(r"(\d+) (\S+) flags (\d+) uses (-?\d+) ne (\S+) view (-?\d+) at (\S+) src ?(.*)")


def place(text):
    """(buffer, start, end) of `B:OFFSET+BYTES`, or None for `-`."""
    if text == "-":
        return None
    buf, rest = text.split(":")
    off, size = rest.split("+")
    return (int(buf), int(off), int(off) + int(size))


def source(token):
    """("node", index) for a node of the graph, ("outside", op, place) for `x=OP@PLACE` (or the
    older `x=PLACE`, op unknown: None)."""
    if not token.startswith("x="):
        return ("node", int(token))
    rest = token[2:]
    op = None
    if "@" in rest:
        op, rest = rest.split("@", 1)
    return ("outside", op, place(rest))


def read_graphs(path, backend=None):
    """Each graph: a list of nodes (op, place, sources, shape). With `backend`, only the
    graphs whose header names that backend (`graph N nodes on NAME`; older files name
    none)."""
    graphs, nodes = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("graph"):
                name = line.split(" on ", 1)[1].strip() if " on " in line else None
                nodes = []
                if backend is None or name == backend:
                    graphs.append(nodes)
                continue
            m = LINE.match(line.strip())
            if not m or nodes is None:
                continue
            _, op, _, _, ne, _, at, srcs = m.groups()
            shape = tuple(int(x) for x in ne.split(","))
            nodes.append((op, place(at), [source(t) for t in srcs.split()], shape))
    return graphs


def overlaps(a, b):
    return a is not None and b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


# ggml-cuda's top-k MoE kernel reads all its logits before it writes, when the gating has at
# most this many rows (TOPK_MOE_ROWS_PER_BLOCK): its memory check lets them alias the outputs.
TOPK_ROWS_PER_BLOCK = 8
GATING = ("SOFT_MAX", "SIGMOID", "SOFTPLUS")


def topk_logits(nodes, run):
    """The node index of the logits a top-k MoE run may overlap (the gating node's first
    source, when the run starts with the gating and holds ARGSORT and GET_ROWS and the gating
    has few rows), else None."""
    first = nodes[run[0]]
    ops = {nodes[i][0] for i in run}
    if first[0] not in GATING or "ARGSORT" not in ops or "GET_ROWS" not in ops:
        return None
    shape = first[3]
    if shape[1] * shape[2] * shape[3] > TOPK_ROWS_PER_BLOCK or not first[2]:
        return None
    src = first[2][0]
    return src[1] if src[0] == "node" else None


def blocked(nodes, run):
    """Whether the output of the run's last node overlaps a source from outside the run, as
    ggml-cuda checks it: sources of op NONE are skipped, a source that is an earlier node of
    the run is inside it, and a top-k MoE run's logits may overlap."""
    out = nodes[run[-1]][1]
    logits = topk_logits(nodes, run)
    for j in run:
        for src in nodes[j][2]:
            if src[0] == "node":
                k = src[1]
                if run[0] <= k < j or nodes[k][0] == "NONE" or k == logits:
                    continue
                where = nodes[k][1]
            else:
                _, op, where = src
                if op == "NONE":
                    continue
            if overlaps(out, where):
                return True
    return False


def runs(nodes):
    """(name, node indexes) of every candidate run of a dense decode graph whose fusion
    ggml-cuda checks for memory overlap (RMS_NORM, MUL alone and with ADD it fuses without
    that check, so no layout blocks them)."""
    for i, (op, _, _, _) in enumerate(nodes):
        if "GLU" in op and i >= 2 and nodes[i - 1][0] == "MUL_MAT" and nodes[i - 2][0] == "MUL_MAT":
            yield "MUL_MAT,MUL_MAT,GLU", (i - 2, i - 1, i)
        if (op == "ROPE" and i >= 2 and nodes[i - 1][0] == "MUL" and nodes[i - 2][0] == "RMS_NORM"
                and ("node", i - 2) in nodes[i - 1][2]):
            yield "RMS_NORM,MUL,ROPE", (i - 2, i - 1, i)


def count(paths):
    for path in paths:
        seen = set()
        for nodes in read_graphs(path):
            if len(nodes) in seen:
                continue
            seen.add(len(nodes))
            counts = {}
            for name, run in runs(nodes):
                total, bad = counts.get(name, (0, 0))
                counts[name] = (total + 1, bad + int(blocked(nodes, run)))
            if not counts:
                print(f"{path}: graph of {len(nodes)} nodes: none of these runs")
            for name, (total, bad) in sorted(counts.items()):
                print(f"{path}: graph of {len(nodes)} nodes: {name}: "
                      f"{bad} of {total} blocked by the layout")
    return 0


def windows(nodes, k_max):
    """Every run of 2 to k_max consecutive nodes, as a range."""
    for end in range(len(nodes)):
        for k in range(2, k_max + 1):
            if end - k + 1 < 0:
                break
            yield range(end - k + 1, end + 1)


def pairs(graphs_a, graphs_b):
    """(index in B, A's graph, B's graph) for each graph of B, paired with the graph of A that
    has the same ops and shapes: the k-th of B's graphs with a given sequence goes with A's
    k-th (or A's last, when A wrote fewer: the tracer writes a graph again when its layout
    changes, so the arms may write a graph a different number of times). B's graphs that A
    never computed get None."""
    def key_of(g):
        return tuple((n[0], n[3]) for n in g)

    by_ops = {}
    for g in graphs_a:
        by_ops.setdefault(key_of(g), []).append(g)
    seen = {}
    for i, g in enumerate(graphs_b):
        key = key_of(g)
        k = seen.get(key, 0)
        seen[key] = k + 1
        same = by_ops.get(key)
        yield i, (same[min(k, len(same) - 1)] if same else None), g


def compare(path_a, path_b, k_max, backend=None):
    graphs_a, graphs_b = read_graphs(path_a, backend), read_graphs(path_b, backend)
    only_b = only_a = checked = skipped = 0
    for g, a, b in pairs(graphs_a, graphs_b):
        if a is None:
            skipped += 1
            print(f"graph {g} of B ({len(b)} nodes): A computed no graph with its ops and "
                  f"shapes: skipped")
            continue
        checked += 1
        for run in windows(a, k_max):
            ba, bb = blocked(a, run), blocked(b, run)
            if ba == bb:
                continue
            ops = ",".join(a[i][0] for i in run)
            if bb:
                only_b += 1
                print(f"graph {g} ({len(a)} nodes): nodes {run[0]}-{run[-1]} ({ops}): "
                      f"B's layout forbids the fusion, A's allows it")
            else:
                only_a += 1
                print(f"graph {g} ({len(a)} nodes): nodes {run[0]}-{run[-1]} ({ops}): "
                      f"A's layout forbids the fusion, B's allows it")
    print(f"{checked} graphs of B checked ({skipped} without a graph of the same ops and "
          f"shapes in A), "
          f"runs of 2 to {k_max} nodes: {only_b} forbidden only in B, {only_a} only in A")
    if not graphs_b:
        print(f"no graphs{' on ' + backend if backend else ''} in {path_b}: nothing compared")
        return 1
    return 1 if only_b or skipped else 0


def self_test():
    """Checks `blocked` and `pairs` on small graphs whose answers are known from ggml-cuda's
    rule; exit status 1 on a wrong answer."""
    def node(op, at, srcs, ne=(4, 1, 1, 1)):
        return (op, at, srcs, ne)
    w = ("outside", "NONE", (0, 0, 64))  # a weight over every byte below: op NONE, not checked
    x = ("outside", "ADD", (0, 0, 16))                   # a node of another graph
    cases = []
    # a product pair and its GLU: the output over the normed input (outside the run) blocks
    g = [node("RMS_NORM", (0, 0, 16), [x]),
         node("MUL_MAT", (0, 16, 32), [w, ("node", 0)]),
         node("MUL_MAT", (0, 32, 48), [w, ("node", 0)]),
         node("SWIGLU", (0, 0, 16), [("node", 1), ("node", 2)])]
    cases.append(("GLU over the normed input", blocked(g, range(1, 4)), True))
    # the same output over the first product (inside the run, read before) and the weight
    # (op NONE): allowed
    g[3] = node("SWIGLU", (0, 16, 32), [("node", 1), ("node", 2)])
    cases.append(("GLU over a product of the run and a weight", blocked(g, range(1, 4)), False))
    # top-k: the weights output over the logits is allowed with few rows, not with many
    def topk(rows):
        return [node("MUL_MAT", (1, 0, 32), [x], (8, rows, 1, 1)),
                node("SOFT_MAX", (1, 32, 64), [("node", 0)], (8, rows, 1, 1)),
                node("RESHAPE", (1, 32, 64), [("node", 1)]),
                node("ARGSORT", (1, 64, 96), [("node", 2)]),
                node("VIEW", (1, 64, 80), [("node", 3)]),
                node("GET_ROWS", (1, 0, 16), [("node", 2), ("node", 4)])]
    cases.append(("top-k weights over its logits, 1 row", blocked(topk(1), range(1, 6)), False))
    cases.append(("top-k weights over its logits, 64 rows", blocked(topk(64), range(1, 6)), True))
    # pairing by ops and shapes: B's extra prompt graph goes with A's prompt graph
    a_pp = [node("ADD", (0, 0, 16), [x], (4, 32, 1, 1))]
    a_tg = [node("ADD", (0, 0, 16), [x], (4, 1, 1, 1))]
    b_pp2 = [node("ADD", (0, 16, 32), [x], (4, 32, 1, 1))]
    paired = [(i, a) for i, a, _ in pairs([a_pp, a_tg], [a_pp, b_pp2, a_tg])]
    cases.append(("pairing by shape", [a is a_pp for _, a in paired[:2]] + [paired[2][1] is a_tg],
                  [True, True, True]))
    bad = [(name, got, want) for name, got, want in cases if got != want]
    for name, got, want in bad:
        print(f"self-test: {name}: got {got}, want {want}")
    print(f"self-test: {len(cases) - len(bad)} of {len(cases)} cases right")
    return 1 if bad else 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    values = {i + 1 for i, a in enumerate(argv) if a in ("--window", "--backend")}
    missing = [p for i, p in enumerate(argv)
               if i not in values and not p.startswith("--") and not os.path.isfile(p)]
    if missing:
        print(f"fusion_check.py: no such file: {missing[0]}", file=sys.stderr)
        return 2
    if argv[:1] == ["--compare"]:
        args, k_max, backend = argv[1:], 12, None
        while args[:1] in (["--window"], ["--backend"]):
            if len(args) < 2:
                print(f"{args[0]} needs a value", file=sys.stderr)
                return 2
            if args[0] == "--window":
                if not args[1].isdigit() or int(args[1]) < 2:
                    print("--window needs a whole number of nodes, 2 or more", file=sys.stderr)
                    return 2
                k_max = int(args[1])
            else:
                backend = args[1]
            args = args[2:]
        if len(args) != 2:
            print("usage: fusion_check.py --compare [--window K] [--backend NAME] A.txt B.txt",
                  file=sys.stderr)
            return 2
        return compare(args[0], args[1], k_max, backend)
    if not argv or argv[0].startswith("--"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    return count(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
