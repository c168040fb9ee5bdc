// The page's script: renders the records embedded in #data (GGML_SCHED_DUMP format 1,
// docs/sched-dump.md) as the overview, the node list with search and the node detail, and
// on an A/B page the two sides and the nodes placed differently. No network, no library.
// When it has rendered, <body> carries data-ready="1", data-errors (uncaught errors seen),
// data-overviews (overview layouts shown), data-detail (the node whose detail is shown),
// data-render-ms (the script's first render) and data-list-ms (the last node-list render),
// for the browser check (docs/sched-view.md).
"use strict";
(function () {
  const t0 = performance.now();
  const errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message));
    document.body.dataset.errors = String(errors.length);
  });
  const D = JSON.parse(document.getElementById("data").textContent);
  const CAUSES = {
    "user": "set by ggml_backend_sched_set_tensor_backend",
    "prealloc": "its storage is allocated: the first backend that can use that buffer type and run the op",
    "pre-view": "a view of allocated storage: the backend of that storage",
    "input": "a graph input without storage: the CPU",
    "weight": "it reads a weight: the backend holding the weight",
    "offload": "it reads a host weight and a higher-priority backend asked to run it (offload_op)",
    "expd-dn": "pass 2: a device backend spread down the graph",
    "expd-up": "pass 2: a device backend spread up the graph",
    "exp-dn": "pass 2: any backend spread down the graph",
    "exp-up": "pass 2: any backend spread up the graph",
    "upgrade": "pass 3: moved to a higher-priority backend with the same buffer type",
    "best-in": "pass 3: the supporting backend that can use most of its inputs",
    "view-src": "pass 4: a view, on the backend of its view source",
    "from-dst": "pass 4: a source without a backend, on the backend of its reader",
    "first-ok": "pass 4: the first backend that supports the op",
    "inplace": "the in-place rule: a writer and the storage it writes on one backend (not in stock)"
  };
  const st = { pair: 0, rec: 0, side: "a", q: "", filter: "all", split: null, limit: 200, node: null, nodeKind: "node" };
  const app = document.getElementById("app");
  const consumersCache = new Map();

  function el(tag, attrs) {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "onclick" || k === "oninput" || k === "onchange") e[k] = attrs[k];
      else if (k === "style") e.style.cssText = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (let i = 2; i < arguments.length; i++) {
      const c = arguments[i];
      if (c == null) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }
  function color(name) { return D.palette[name] || "#e0e0e0"; }
  function bname(rec, b) { return b == null ? "—" : (rec.backends[b] ? rec.backends[b].name : "?"); }
  function chip(rec, b) {
    const n = bname(rec, b);
    return el("span", { "class": "chip", style: "background:" + color(n) }, n);
  }
  function fmtBytes(b) {
    if (b < 1024) return b + " B";
    if (b < 1048576) return (b / 1024).toFixed(1) + " KiB";
    if (b < 1073741824) return (b / 1048576).toFixed(1) + " MiB";
    return (b / 1073741824).toFixed(2) + " GiB";
  }
  // The defect of issue 5: an in-place writer on a backend that cannot use the storage it
  // writes. A writer of host memory its backend supports (`usable`) is apart but no defect.
  function apart(n) { return !!n.inplace && !n.inplace.same_backend && n.inplace.usable !== true; }
  function shape(s) { let n = s.length; while (n > 1 && s[n - 1] === 1) n--; return s.slice(0, n).join("×"); }
  function recOf(side) {
    if (D.mode === "ab") { const p = D.pairs[st.pair]; return D[side][side === "a" ? p.a : p.b]; }
    return D.a[st.rec];
  }
  function recIndex(side) {
    if (D.mode === "ab") { const p = D.pairs[st.pair]; return side === "a" ? p.a : p.b; }
    return st.rec;
  }
  function sideLabel(side) {
    if (D.mode !== "ab") return "";
    const r = recOf(side);
    return (side === "a" ? "A" : "B") + (r.settings.inplace_rule ? " (in-place rule on)" : " (rule off: as stock)");
  }
  function consumers(rec) {
    let m = consumersCache.get(rec);
    if (!m) {
      m = { node: new Map(), leaf: new Map() };
      rec.nodes.forEach(function (n) {
        n.srcs.forEach(function (s) {
          const t = s.tensor;
          if (t.index == null || !m[t.kind]) return;
          if (!m[t.kind].has(t.index)) m[t.kind].set(t.index, []);
          m[t.kind].get(t.index).push(n.index);
        });
      });
      consumersCache.set(rec, m);
    }
    return m;
  }
  // An index from the address (#rec=K, #pair=K) into a list of n: clamped to 0..n-1, and 0
  // for anything that is not a whole number (a negative or NaN index left the page blank).
  function hashIndex(v, n) { const i = Number(v); return Number.isInteger(i) ? Math.max(0, Math.min(i, n - 1)) : 0; }
  function parseHash() {
    const h = new URLSearchParams(location.hash.replace(/^#/, ""));
    if (h.has("pair") && D.mode === "ab") st.pair = hashIndex(h.get("pair"), D.pairs.length);
    if (h.has("rec")) st.rec = hashIndex(h.get("rec"), D.a.length);
    if (h.has("side") && D.mode === "ab") st.side = h.get("side") === "b" ? "b" : "a";
    if (h.has("q")) st.q = h.get("q");
    if (h.has("node")) { st.node = +h.get("node"); st.nodeKind = "node"; }
    if (h.has("leaf")) { st.node = +h.get("leaf"); st.nodeKind = "leaf"; }
  }

  function notes() {
    const n = document.getElementById("notes");
    n.textContent = "";
    if (D.command) n.append(el("p", { "class": "cmd" }, "Made by: ", el("code", null, D.command)));
    if (D.mode === "ab") {
      const p = D.pairs[st.pair];
      const a = D.a[p.a], b = D.b[p.b];
      if (!a.settings.inplace_rule) {
        n.append(el("p", { "class": "stock" },
          "Side A is the stock placement: stock's scheduler writes no dump, so side A is the same graph run through our scheduler with ",
          el("code", null, "GGML_SCHED_INPLACE_RULE=0"),
          ", which places every node exactly as stock does (the differential test, docs/sched-diff.md)."));
      }
      n.append(el("p", null, "Side A: " + a._file + " · side B: " + b._file +
        (p.same_structure ? " · the same graph (structure hash " + a.graph.structure_hash + ")"
                          : " · different graphs (structure hashes " + a.graph.structure_hash + " and " +
                            b.graph.structure_hash + "): tensors matched by name, " + p.matched + " of A's " +
                            p.a_tensors + " found in B")));
      const u = D.unpaired || { a: [], b: [] };
      ["a", "b"].forEach(function (side) {
        const files = u[side] || [];
        if (files.length) {
          n.append(el("p", { "class": "stock" }, files.length + " of side " + side.toUpperCase() + "'s " + D[side].length +
            " records have no record of the same structure on the other side and are not shown: " +
            files.map(function (f) { return f.split("/").pop(); }).join(", ")));
        }
      });
    }
  }

  function picker() {
    if (D.mode === "ab") {
      if (D.pairs.length < 2) return null;
      const s = el("select", { id: "pick", onchange: function () { st.pair = +this.value; st.node = null; renderAll(); } });
      D.pairs.forEach(function (p, i) {
        const a = D.a[p.a];
        s.append(el("option", { value: i }, "graph " + i + ": " + a.graph.n_nodes + " nodes, " +
          p.differs.length + " placed differently"));
      });
      s.value = st.pair;
      return el("p", null, "Graph pair: ", s);
    }
    if (D.a.length < 2) return null;
    const s = el("select", { id: "pick", onchange: function () { st.rec = +this.value; st.node = null; st.split = null; renderAll(); } });
    D.a.forEach(function (r, i) {
      s.append(el("option", { value: i }, "graph " + i + ": " + r.graph.n_nodes + " nodes, " + r.splits.length +
        " splits on " + r.backends.map(function (b) { return b.name; }).join("+") + " (" + r._file.split("/").pop() + ")"));
    });
    s.value = st.rec;
    return el("p", null, D.a.length + " distinct graphs. Showing: ", s);
  }

  function summary(side) {
    const r = recOf(side);
    let copies = 0, bytes = 0, moved = 0, napart = 0, writers = 0;
    r.splits.forEach(function (s) { copies += s.inputs.length; bytes += s.bytes_in; });
    r.nodes.forEach(function (n) {
      if (n.move) moved++;
      if (n.inplace) { writers++; if (apart(n)) napart++; }
    });
    const legend = el("div", { "class": "legend" });
    r.backends.forEach(function (b) {
      legend.append(el("span", { "class": "chip", style: "background:" + color(b.name) }, b.name),
        " " + b.buffer_type + (b.cpu ? " (CPU) " : " "));
    });
    const s = el("p", { "class": "summary" },
      r.graph.n_nodes + " nodes, " + r.graph.n_leafs + " leafs, " + r.splits.length + " splits, " +
      copies + " input copies (" + fmtBytes(bytes) + " per compute), " + writers + " in-place writers, ",
      el("span", { "class": moved ? "hl-move" : "" }, moved + " moved by the in-place rule"), ", ",
      el("span", { "class": napart ? "hl-apart" : "" }, napart + " writers apart from their storage"),
      ". In-place rule " + (r.settings.inplace_rule ? "on" : "off") + ", " + r.settings.n_copies + " pipeline cop" +
      (r.settings.n_copies === 1 ? "y" : "ies") + ".");
    return el("div", null, legend, s);
  }

  function bands(side) {
    const r = recOf(side);
    const strip = el("div", { "class": "bands", title: "splits in compute order, width by op count; click one to list its nodes" });
    r.splits.forEach(function (s) {
      const n = bname(r, s.backend);
      strip.append(el("div", {
        "class": "band", style: "flex-grow:" + Math.max(s.n_ops, 1) + ";background:" + color(n),
        title: "#" + s.index + " " + n + ": " + s.n_ops + " ops, " + s.inputs.length + " copies, " + fmtBytes(s.bytes_in),
        onclick: function () { selectSplit(side, s.index); }
      }));
    });
    return strip;
  }

  function layoutDiv(side, kind) {
    return document.querySelector('.layout[data-side="' + side + '"][data-rec="' + recIndex(side) + '"][data-kind="' + kind + '"]');
  }

  function overviewPanel(side) {
    const box = el("div", { "class": "panel overview" }, el("h2", null, "Overview " + sideLabel(side)), summary(side), bands(side));
    const l = layoutDiv(side, "overview");
    if (l) {
      l.querySelectorAll("g.node").forEach(function (g) {
        const m = /^s(\d+)$/.exec(g.id);
        if (m) g.onclick = function () { selectSplit(side, +m[1]); };
      });
      box.append(el("div", { "class": "svgbox" }, l));
    }
    return box;
  }

  function selectSplit(side, k) {
    st.side = side; st.filter = "split"; st.split = k; st.limit = 200;
    renderList();
    const f = document.getElementById("filter");
    if (f) f.scrollIntoView({ block: "start" });
  }

  function diffPanel() {
    const p = D.pairs[st.pair];
    const a = D.a[p.a];
    const box = el("div", { "class": "panel" }, el("h2", null, p.differs.length + " tensors placed differently (A → B)"));
    if (!p.differs.length) {
      box.append(el("p", null, p.same_structure ? "Both sides place every node and leaf on the same backend."
        : p.matched === 0 ? "Different graphs: none of A's " + p.a_tensors + " nodes and leafs has a tensor of the same name in B, so nothing was compared."
        : "Different graphs: the " + p.matched + " of A's " + p.a_tensors + " nodes and leafs that have a tensor of the same name in B are on the same backend on both sides; the others were not compared."));
      return box;
    }
    const t = el("table", { "class": "grid", id: "diff" });
    t.append(el("tr", null, el("th", null, "kind"), el("th", null, "#"), el("th", null, "name"), el("th", null, "op"),
      el("th", null, "A backend (cause)"), el("th", null, "B backend (cause)"), el("th", null, "B's in-place move")));
    p.differs.forEach(function (d) {
      const tr = el("tr", {
        "class": "click" + (d.b_move ? " row-move" : "") + (d.a_apart ? " row-apart" : ""),
        onclick: function () { st.side = "a"; showNode(d.kind, d.a_index); }
      },
        el("td", null, d.kind), el("td", null, d.a_index), el("td", { "class": "name" }, d.name), el("td", null, d.op),
        el("td", null, el("span", { "class": "chip", style: "background:" + color(d.a_backend) }, d.a_backend), " " + d.a_cause +
          (d.a_apart ? " ⚠ apart from its storage" : "")),
        el("td", null, el("span", { "class": "chip", style: "background:" + color(d.b_backend) }, d.b_backend), " " + d.b_cause),
        el("td", null, d.b_move || ""));
      t.append(tr);
    });
    box.append(el("div", { "class": "scroll", id: "diff-wrap" }, t));
    return box;
  }

  function listPanel() {
    const box = el("div", { "class": "panel", id: "listpanel" });
    box.append(el("h2", null, "Nodes"));
    const ctl = el("div", { "class": "controls", id: "filter" });
    if (D.mode === "ab") {
      const s = el("select", { id: "side", onchange: function () { st.side = this.value; st.limit = 200; renderList(); renderDetail(); } },
        el("option", { value: "a" }, "side A"), el("option", { value: "b" }, "side B"));
      s.value = st.side;
      ctl.append(s, " ");
    }
    const q = el("input", { id: "q", type: "search", placeholder: "search tensor name or op", value: st.q,
      oninput: function () { st.q = this.value; st.limit = 200; renderList(); } });
    const f = el("select", { id: "which", onchange: function () { st.filter = this.value; st.limit = 200; renderList(); } },
      el("option", { value: "all" }, "all nodes"), el("option", { value: "ops" }, "nodes that compute (no views)"),
      el("option", { value: "moved" }, "moved by the in-place rule"), el("option", { value: "writers" }, "in-place writers"),
      el("option", { value: "apart" }, "writers apart from their storage"), el("option", { value: "copied" }, "read through a copy"),
      el("option", { value: "leafs" }, "leafs"), el("option", { value: "split" }, "one split"));
    f.value = st.filter;
    ctl.append(q, " ", f, " ", el("span", { id: "count" }));
    box.append(ctl, el("div", { id: "detail", "class": "panel detail" }), el("div", { id: "list" }));
    return box;
  }

  function matches(t, q) {
    if (!q) return true;
    return t.name.toLowerCase().indexOf(q) >= 0 || t.op.toLowerCase() === q;
  }

  function renderList() {
    const tl = performance.now();
    const r = recOf(st.side);
    const list = document.getElementById("list");
    const which = document.getElementById("which");
    if (which) which.value = st.filter;
    const sideSel = document.getElementById("side");
    if (sideSel) sideSel.value = st.side;
    const q = st.q.trim().toLowerCase();
    const leafs = st.filter === "leafs";
    const src = leafs ? r.leafs : r.nodes;
    const rows = src.filter(function (t) {
      if (!matches(t, q)) return false;
      switch (st.filter) {
        case "ops": return !t.is_view;
        case "moved": return !!t.move;
        case "writers": return !!t.inplace;
        case "apart": return apart(t);
        case "copied": return t.srcs.some(function (s) { return s.via_copy; });
        case "split": return t.split === st.split;
        default: return true;
      }
    });
    document.getElementById("count").textContent = rows.length + " of " + src.length + (leafs ? " leafs" : " nodes") +
      (st.filter === "split" && st.split != null ? " (split #" + st.split + ")" : "");
    const t = el("table", { "class": "grid", id: "nodes" });
    t.append(el("tr", null, el("th", null, "#"), el("th", null, "name"), el("th", null, "op"), el("th", null, "type"),
      el("th", null, "shape"), el("th", null, "backend"), el("th", null, "cause"), el("th", null, "buffer type"),
      el("th", null, "split"), el("th", null, "in-place")));
    rows.slice(0, st.limit).forEach(function (n) {
      let ip = "";
      if (n.move) ip = "moved " + bname(r, n.move.from) + " → " + bname(r, n.move.to);
      else if (n.inplace) ip = apart(n) ? "⚠ apart from " + n.inplace.root.name
        : (n.inplace.same_backend ? "writes " : "writes host storage of ") + n.inplace.root.name;
      t.append(el("tr", {
        "class": "click" + (n.move ? " row-move" : "") + (apart(n) ? " row-apart" : "") +
          (n.is_view ? " row-view" : ""),
        "data-i": n.index,
        onclick: function () { showNode(leafs ? "leaf" : "node", n.index); }
      },
        el("td", null, n.index), el("td", { "class": "name" }, n.name), el("td", null, n.op), el("td", null, n.type),
        el("td", null, shape(n.shape)), el("td", null, chip(r, n.backend)), el("td", { title: CAUSES[n.cause] || "" }, n.cause || "—"),
        el("td", null, n.buffer_type || "—"), el("td", null, n.split == null ? "" : "#" + n.split), el("td", null, ip)));
    });
    list.textContent = "";
    list.append(el("div", { "class": "scroll" }, t));
    if (rows.length > st.limit) {
      list.append(el("button", { onclick: function () { st.limit += 500; renderList(); } },
        "show " + Math.min(500, rows.length - st.limit) + " more of " + (rows.length - st.limit)));
    }
    document.body.dataset.listMs = (performance.now() - tl).toFixed(1);
  }

  function tensorLink(r, t, side) {
    if (t.index == null || (t.kind !== "node" && t.kind !== "leaf")) return el("span", null, t.name + " (" + t.kind + ")");
    const list = t.kind === "node" ? r.nodes : r.leafs;
    const x = list[t.index];
    return el("a", { href: "#", onclick: function (e) { e.preventDefault(); st.side = side; showNode(t.kind, t.index); } },
      t.name, " ", chip(r, x ? x.backend : null), " " + t.kind + " #" + t.index);
  }

  function showNode(kind, i) {
    st.nodeKind = kind; st.node = i;
    renderDetail();
    const d = document.getElementById("detail");
    if (d && d.scrollIntoView) d.scrollIntoView({ block: "nearest" });
  }

  function renderDetail() {
    const d = document.getElementById("detail");
    if (!d) return;
    d.textContent = "";
    const side = st.side;
    const r = recOf(side);
    const list = st.nodeKind === "leaf" ? r.leafs : r.nodes;
    const n = st.node == null ? null : list[st.node];
    if (!n) { d.append(el("p", null, "Click a node in the list, the diff or the node layout to see its placement.")); document.body.dataset.detail = ""; return; }
    const rows = [];
    function row(k, v) { rows.push(el("tr", null, el("th", null, k), el("td", null, v))); }
    row("tensor", st.nodeKind + " #" + n.index + (D.mode === "ab" ? " on side " + side.toUpperCase() : ""));
    row("name", n.name);
    row("op", n.op + (n.is_view ? " (computes nothing: a view or NONE)" : ""));
    row("type · shape · bytes", n.type + " · " + shape(n.shape) + " · " + fmtBytes(n.bytes));
    row("backend", chip(r, n.backend));
    row("cause", el("span", null, (n.cause || "—") + (CAUSES[n.cause] ? ": " + CAUSES[n.cause] : "")));
    row("storage", (n.storage || "—") + (n.buffer_type ? " in " + n.buffer_type : ""));
    if (n.split != null) {
      const s = r.splits[n.split];
      row("split", el("a", { href: "#", onclick: function (e) { e.preventDefault(); selectSplit(side, s.index); } },
        "#" + s.index + " on " + bname(r, s.backend) + ", nodes " + s.first_node + "–" + (s.end_node - 1) + ", " + s.n_ops + " ops"));
    }
    if (n.flags.length) row("flags", n.flags.join(", "));
    if (n.view_src) row("view of", tensorLink(r, n.view_src, side));
    if (n.inplace) {
      row("in-place writer of", el("span", null, tensorLink(r, n.inplace.root, side),
        n.inplace.same_backend ? " — on the same backend"
          : !apart(n) ? " — on another backend (" + bname(r, n.inplace.root_backend) + "), in host memory this backend can use: no defect"
          : el("b", { "class": "hl-apart" }, " — ⚠ on another backend (" + bname(r, n.inplace.root_backend) + ")")));
    }
    if (n.move) row("in-place rule", el("b", { "class": "hl-move" }, "moved " + bname(r, n.move.from) + " → " + bname(r, n.move.to) + " (" + n.move.call + " call)"));
    if (n.srcs && n.srcs.length) {
      const ul = el("ul");
      n.srcs.forEach(function (s) { ul.append(el("li", null, "src[" + s.slot + "] ", tensorLink(r, s.tensor, side), s.via_copy ? " — read through a split-input copy" : "")); });
      row("sources", ul);
    }
    const cons = consumers(r)[st.nodeKind].get(n.index) || [];
    if (cons.length) {
      const ul = el("ul");
      cons.slice(0, 50).forEach(function (c) { ul.append(el("li", null, tensorLink(r, { kind: "node", index: c, name: r.nodes[c].name }, side))); });
      if (cons.length > 50) ul.append(el("li", null, "… " + (cons.length - 50) + " more"));
      row("read by", ul);
    }
    if (D.mode === "ab") {
      const other = side === "a" ? "b" : "a";
      const ro = recOf(other);
      const p = D.pairs[st.pair];
      let o = null;
      const ol = st.nodeKind === "leaf" ? ro.leafs : ro.nodes;
      if (p.same_structure) o = ol[n.index];
      else {
        // Matched by name as diff.rs matches them: the k-th tensor of this name on this side
        // with the k-th of that name on the other (names repeat: llama.cpp's Kcur-0).
        const k = list.filter(function (x) { return x.name === n.name; }).indexOf(n);
        o = ol.filter(function (x) { return x.name === n.name; })[k] || null;
      }
      if (o) {
        row("side " + other.toUpperCase(), el("span", null, chip(ro, o.backend), " " + (o.cause || "—") +
          (o.move ? " · moved " + bname(ro, o.move.from) + " → " + bname(ro, o.move.to) : ""), " ",
          el("a", { href: "#", onclick: function (e) { e.preventDefault(); st.side = other; renderList(); showNode(st.nodeKind, o.index); } }, "show")));
      }
    }
    const kv = el("table", { "class": "kv" });
    rows.forEach(function (x) { kv.append(x); });
    d.append(el("h2", null, "Detail: " + n.name), kv);
    document.body.dataset.detail = st.nodeKind + ":" + n.index;
    document.querySelectorAll("#nodes tr.sel").forEach(function (x) { x.classList.remove("sel"); });
  }

  function nodesLayout() {
    const wrap = el("div");
    const sides = D.mode === "ab" ? ["a", "b"] : ["a"];
    sides.forEach(function (side) {
      const l = layoutDiv(side, "nodes");
      if (!l) return;
      l.querySelectorAll("g.node").forEach(function (g) {
        const m = /^([nf])(\d+)$/.exec(g.id);
        if (m) g.onclick = function () { st.side = side; showNode(m[1] === "n" ? "node" : "leaf", +m[2]); };
      });
      wrap.append(el("details", { "class": "panel", open: "" }, el("summary", null, "Every node, grouped by split " + sideLabel(side) +
        " (Graphviz; dashed red: read through a copy; thick border: moved by the in-place rule or apart from its storage)"),
        el("div", { "class": "svgbox" }, l)));
    });
    if (!wrap.childNodes.length) {
      wrap.append(el("p", { "class": "note" }, "Graphs of more than " + D.node_graph_limit +
        " tensors get no node-level layout (too big to read or lay out quickly): use the overview and the node list."));
    }
    return wrap;
  }

  function renderAll() {
    const store = document.getElementById("layouts");
    document.querySelectorAll("#app .layout").forEach(function (l) { store.append(l); });
    app.textContent = "";
    notes();
    const pk = picker();
    if (pk) app.append(pk);
    if (D.mode === "ab") {
      app.append(diffPanel());
      app.append(el("div", { "class": "cols" }, overviewPanel("a"), overviewPanel("b")));
      app.append(listPanel());
    } else {
      app.append(el("div", { "class": "cols single" }, overviewPanel("a"), listPanel()));
    }
    app.append(nodesLayout());
    renderList();
    renderDetail();
    document.body.dataset.overviews = String(app.querySelectorAll(".overview svg").length);
  }

  parseHash();
  renderAll();
  window.addEventListener("hashchange", function () { parseHash(); renderAll(); });
  document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
  document.body.dataset.ready = "1";
})();
