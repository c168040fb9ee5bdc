// fake_backend.h - one configurable fake ggml backend for the C test programs.
//
// The scheduler programs (sched-bench, sched-diff) need devices the scheduler can place
// nodes on without computing anything. This file gives them one implementation of the
// ggml-backend-impl.h interfaces - registry, device, buffer type, buffer, backend - whose
// differences are data: each device is described by a `struct fake_dev_desc` (name, type,
// alignment, host flag, op support, offload, optional graph hooks, how buffers are
// allocated, whether data traffic is logged). Policy (which ops a device supports, which
// other buffer types it may use) stays in the program, as callbacks.
//
// Storage is static in the caller: a `struct fake_reg` holds its devices, so the pointers
// ggml keeps (buffer types, devices, backends) stay valid for the program's life and
// nothing is allocated to set devices up. Freeing a backend does nothing.

#ifndef FAKE_BACKEND_H
#define FAKE_BACKEND_H

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <stdbool.h>
#include <stddef.h>

#define FAKE_MAX_DEV 8

struct fake_dev;

// How a device's buffer type allocates buffers.
enum fake_alloc {
    // Address space only: mmap(MAP_NORESERVE), never touched. Tensor data accesses
    // (set/get/memset/clear/cpy) do nothing and cpy reports success. For timing the
    // scheduler on model-sized graphs without paying for memory.
    FAKE_ALLOC_RESERVE,
    // Heap memory: aligned_alloc of the size rounded up to the alignment. Data accesses
    // really read and write it; cpy copies only between buffers of this registry's devices
    // (else it declines, and ggml falls back to get + set).
    FAKE_ALLOC_HEAP,
};

// One device. Callbacks receive the device; `user` is the program's own description of it.
struct fake_dev_desc {
    const char *               name;        // device and backend name
    const char *               buft_name;   // buffer type name; NULL: `name`
    const char *               description; // NULL: `name`
    enum ggml_backend_dev_type type;
    size_t                     alignment;   // buffer type alignment, bytes
    bool                       host;        // buffer type is host-addressable (is_host)
    size_t                     memory;      // reported as both free and total memory, bytes
    ggml_guid                  guid;        // the backend's guid
    enum fake_alloc            alloc;
    // Print `ALLOCBUF`, `RUN` and `SET`/`GET`/`CPY`/`MEMSET`/`CLEAR` lines on stdout (the
    // sched-diff grammar, docs/sched-diff.md).
    bool log;

    // NULL: every op is supported.
    bool (*supports_op)(const struct fake_dev * dev, const struct ggml_tensor * op);
    // NULL: only the device's own buffer type.
    bool (*supports_buft)(const struct fake_dev * dev, ggml_backend_buffer_type_t buft);
    // NULL: the device has no offload_op entry (the scheduler then never offloads to it).
    bool (*offload_op)(const struct fake_dev * dev, const struct ggml_tensor * op);
    // NULL: the backend has no graph_optimize entry. Else called on each split's graph,
    // before compute, and may reorder its nodes in place.
    void (*graph_optimize)(const struct fake_dev * dev, struct ggml_cgraph * cgraph);
    // NULL: nothing. Else called by graph_compute (after its RUN line, when logging).
    void (*on_compute)(const struct fake_dev * dev, struct ggml_cgraph * cgraph);

    void * user;
};

struct fake_reg;

// A device as ggml sees it: its description and the ggml objects that point back to it.
struct fake_dev {
    struct fake_dev_desc            desc;
    struct fake_reg *               reg;
    int                             index;  // position in the registry
    int                             n_bufs; // buffers its buffer type has allocated so far
    struct ggml_backend_buffer_type buft;
    struct ggml_backend_device      dev;
    struct ggml_backend             backend;
};

// A registry and its devices.
struct fake_reg {
    const char *            name;
    int                     n_devs;
    struct fake_dev         devs[FAKE_MAX_DEV];
    struct ggml_backend_reg reg;
    // Allocator for the small per-buffer records (NULL: calloc / free). A program that
    // counts its heap traffic (sched-bench interposes malloc) passes the uncounted one, so
    // that only the scheduler's own allocations are counted.
    void * (*record_calloc)(size_t n, size_t size);
    void (*record_free)(void * p);
};

// Empties `reg` (no devices) and names it; the allocator hooks are reset to NULL.
void fake_reg_init(struct fake_reg * reg, const char * name);

// Adds a device described by `desc` (copied; its strings must outlive the registry) and
// returns it. Aborts when the registry already holds FAKE_MAX_DEV devices.
struct fake_dev * fake_reg_add(struct fake_reg * reg, const struct fake_dev_desc * desc);

// The registry's device whose buffer type is `buft`, or NULL (another registry's, or a
// library's own buffer type).
struct fake_dev * fake_dev_of_buft(const struct fake_reg * reg, ggml_backend_buffer_type_t buft);

// The device behind a backend of this registry (its `backend` member).
struct fake_dev * fake_dev_of_backend(ggml_backend_t backend);

// The allocation number of a buffer that one of this registry's buffer types allocated:
// k for the buffer type's k-th allocation (from 0, counted since the device was added, freed
// buffers included), the number in that buffer's `ALLOCBUF` line. -1 for NULL, for another
// registry's or a library's buffer, and for ggml's zero-size dummy buffers (made without
// asking the buffer type). Deterministic, unlike the buffer's address.
int fake_buffer_serial(const struct fake_reg * reg, ggml_backend_buffer_t buffer);

#endif // FAKE_BACKEND_H
