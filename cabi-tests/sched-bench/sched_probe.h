// The probe's mid-run counters (sched_probe.c), as handed to a program that asks for them
// (archs_cycle.c) through sched_probe_read, found with dlsym. One definition for both sides.
#pragma once

struct probe_snapshot {
    long long calls;          // ggml_backend_sched_alloc_graph calls so far
    long long ns;             // and their total time
    long long reset_calls;    // ggml_backend_sched_reset calls so far
    long long reset_ns;       // and their total time
    long long last_nodes;     // nodes of the last graph given to alloc_graph
    long long last_backends;  // backends of the scheduler of that call
    long long last_splits;    // splits of that call
    // FNV-1a over the backend index of every node of that graph, in node order (0 when
    // SCHED_PROBE_HASH is unset): equal hashes mean the same placement of every node.
    unsigned long long last_placement_hash;
    // With SCHED_PROBE_HASH set: the compute buffer of each backend after that call
    // (ggml_backend_sched_get_buffer_size), bytes, for the first 4 backends; 0 past n_backends.
    long long last_buffer_bytes[4];
};

typedef void (*sched_probe_read_fn)(struct probe_snapshot * out, unsigned long size);
