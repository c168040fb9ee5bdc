#!/usr/bin/env python3
"""Sets two arms' backend traces side by side (backend_trace.c writes them).

    backend_trace.py [--nodes N] [--skip K] [--server S.trace] A.trace B.trace

For each file: the decodes whose first graph has N nodes (default: the node count most decodes
of file A have: the text generation graph of a tg run), the first K of each process left out
(default 8: warm-up, CUDA graph capture), grouped by their call sequence
(kind and backend of every call, in order). For the commonest sequence of each arm, one row per
call: the median start and duration in microseconds from the decode's start, in each arm, and
B's start minus A's. When the arms' sequences differ, both are printed, aligned, and the table
covers the calls they share. With --server, the trace of the ggml-rpc-server both clients
used (written in absolute times): its calls during each client decode's cycle join that
decode's, named srv:KIND. Exit status 1 when a file has no such decode.
"""

import argparse
import collections
import difflib
import statistics
import sys


def read_trace(path, server=()):
    """Returns the decodes of every process in the file, each (index in its process,
    length_ns, [calls], start_ns, cycle_ns or None); a call is (kind, backend name, start_ns,
    end_ns, arg), from the decode's start. `server`: a server's calls (absolute), merged into each decode's cycle."""
    decodes, names, cur, index = [], {}, None, 0
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "process":
                names = {}
                for item in w[3:]:
                    slot, name = item.split("=", 1)
                    names[int(slot)] = name
                index = 0
            elif w[0] == "decode":
                cur = (index, int(w[3]), [], int(w[2]))
                decodes.append(cur)
                index += 1
            elif cur is not None and w[0] != "at":
                who = int(w[1])
                cur[2].append((w[0], names.get(who, "-"), int(w[2]), int(w[3]), int(w[4])))
    # the cycle: from a decode's start to the next one's in the same process (None for the last)
    decodes = [d + ((decodes[k + 1][3] - d[3]) if k + 1 < len(decodes) and decodes[k + 1][0] > 0 else None,)
               for k, d in enumerate(decodes)]
    if server:
        for k, d in enumerate(decodes):
            start = d[3]
            end = decodes[k + 1][3] if k + 1 < len(decodes) and decodes[k + 1][0] > 0 else start + 10**9
            d[2].extend((c[0], c[1], c[2] - start, c[3] - start, c[4])
                        for c in server if start <= c[2] < end)
            d[2].sort(key=lambda c: c[2])
    return decodes


def read_server(path):
    """A server's calls: (srv:kind, backend name, start_ns, end_ns, arg), absolute."""
    calls, names = [], {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if w and w[0] == "process":
                names = {int(i.split("=", 1)[0]): i.split("=", 1)[1] for i in w[3:]}
            elif w and w[0] == "at":
                calls.append(("srv:" + w[1], names.get(int(w[2]), "-"), int(w[3]), int(w[4]), int(w[5])))
    calls.sort(key=lambda c: c[2])
    return calls


def first_graph_nodes(decode):
    """The node count of the decode's first scheduler compute (None without one)."""
    return next((c[4] for c in decode[2] if c[0] == "sched_compute_async"), None)


def signature(decode):
    return tuple((c[0], c[1]) for c in decode[2])


def commonest(decodes):
    by_sig = collections.defaultdict(list)
    for d in decodes:
        by_sig[signature(d)].append(d)
    sig, group = max(by_sig.items(), key=lambda kv: len(kv[1]))
    return sig, group, len(by_sig)


def medians(group):
    """Per call position: (median start us, median duration us, median arg)."""
    rows = []
    for i in range(len(group[0][2])):
        starts = [d[2][i][2] / 1000 for d in group]
        durs = [(d[2][i][3] - d[2][i][2]) / 1000 for d in group]
        args = [d[2][i][4] for d in group]
        rows.append((statistics.median(starts), statistics.median(durs), statistics.median(args)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--skip", type=int, default=8)
    ap.add_argument("--server")
    ap.add_argument("a")
    ap.add_argument("b")
    args = ap.parse_args()
    server = read_server(args.server) if args.server else ()
    traces = [read_trace(p, server) for p in (args.a, args.b)]
    nodes = args.nodes
    if nodes is None:
        counts = collections.Counter(first_graph_nodes(d) for d in traces[0])
        counts.pop(None, None)
        if not counts:
            print(f"{args.a}: no decode with a scheduler compute", file=sys.stderr)
            return 1
        nodes = counts.most_common(1)[0][0]
    print(f"decodes whose first graph has {nodes} nodes, the first {args.skip} of each process left out")
    arms = []
    for path, trace in zip((args.a, args.b), traces):
        decodes = [d for d in trace if d[0] >= args.skip and first_graph_nodes(d) == nodes]
        if not decodes:
            print(f"{path}: no such decode", file=sys.stderr)
            return 1
        sig, group, n_sigs = commonest(decodes)
        total = statistics.median(d[1] / 1000 for d in group)
        cycles = [d[4] / 1000 for d in group if d[4] is not None]
        cycle = statistics.median(cycles) if cycles else float("nan")
        print(f"{path}: {len(decodes)} decodes, {n_sigs} call sequences; the commonest: "
              f"{len(group)} decodes, {len(sig)} calls, decode median {total:.1f} us "
              f"(all decodes: {statistics.median(d[1] / 1000 for d in decodes):.1f} us)")
        arms.append((sig, medians(group), total, cycle))
    (sa, ma, ta, ca), (sb, mb, tb, cb) = arms
    if sa != sb:
        print("\nthe call sequences differ (- only A, + only B):")
        for line in difflib.unified_diff([f"{k} {b}" for k, b in sa], [f"{k} {b}" for k, b in sb],
                                         "A", "B", lineterm="", n=2):
            print("  " + line)
    matcher = difflib.SequenceMatcher(a=sa, b=sb, autojunk=False)
    print(f"\n{'#':>3} {'call':<20} {'backend':<10} {'A start':>9} {'A dur':>8} {'B start':>9} {'B dur':>8} "
          f"{'B-A start':>9} {'B-A dur':>8}  arg")
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            i, j = block.a + k, block.b + k
            kind, who = sa[i]
            (a0, ad, aarg), (b0, bd, _) = ma[i], mb[j]
            print(f"{i:>3} {kind:<20} {who:<10} {a0:>9.1f} {ad:>8.1f} {b0:>9.1f} {bd:>8.1f} "
                  f"{b0 - a0:>+9.1f} {bd - ad:>+8.1f}  {aarg:.0f}")
    print(f"{'':>3} {'decode':<20} {'':<10} {'':>9} {ta:>8.1f} {'':>9} {tb:>8.1f} {'':>9} {tb - ta:>+8.1f}")
    print(f"{'':>3} {'cycle (to next)':<20} {'':<10} {'':>9} {ca:>8.1f} {'':>9} {cb:>8.1f} {'':>9} {cb - ca:>+8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
