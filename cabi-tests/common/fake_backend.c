// fake_backend.c - see fake_backend.h.

#define _GNU_SOURCE // MAP_ANONYMOUS, MAP_NORESERVE under -std=c11
#include "fake_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static struct fake_dev * dev_of(void * context) {
    return (struct fake_dev *) context;
}

static void * record_calloc(const struct fake_reg * reg, size_t size) {
    return reg->record_calloc ? reg->record_calloc(1, size) : calloc(1, size);
}

static void record_free(const struct fake_reg * reg, void * p) {
    if (reg->record_free) {
        reg->record_free(p);
    } else {
        free(p);
    }
}

// ---------------------------------------------------------------------------------------
// buffers

struct fake_buf {
    struct fake_dev * dev;
    void *            base;
    size_t            size;   // as asked (mmap length of a RESERVE buffer)
    int               serial; // the device's n_bufs when it was allocated
};

static const char * buf_name(ggml_backend_buffer_t buffer) {
    return buffer ? ggml_backend_buft_name(buffer->buft) : "-";
}

static void * buf_get_base(ggml_backend_buffer_t buffer) {
    return ((struct fake_buf *) buffer->context)->base;
}

// RESERVE: the memory is never touched, so every data access is a no-op.

static void reserve_free(ggml_backend_buffer_t buffer) {
    struct fake_buf * fb = buffer->context;
    if (fb->size) {
        munmap(fb->base, fb->size);
    }
    record_free(fb->dev->reg, fb);
}

static void reserve_memset(ggml_backend_buffer_t b, struct ggml_tensor * t, uint8_t v, size_t o, size_t s) {
    (void) b; (void) t; (void) v; (void) o; (void) s;
}

static void reserve_set(ggml_backend_buffer_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s) {
    (void) b; (void) t; (void) d; (void) o; (void) s;
}

static void reserve_get(ggml_backend_buffer_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s) {
    (void) b; (void) t; (void) d; (void) o; (void) s;
}

static bool reserve_cpy(ggml_backend_buffer_t b, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    (void) b; (void) src; (void) dst;
    return true;
}

static void reserve_clear(ggml_backend_buffer_t b, uint8_t v) {
    (void) b; (void) v;
}

static const struct ggml_backend_buffer_i reserve_buffer_i = {
    .free_buffer   = reserve_free,
    .get_base      = buf_get_base,
    .init_tensor   = NULL,
    .memset_tensor = reserve_memset,
    .set_tensor    = reserve_set,
    .get_tensor    = reserve_get,
    .set_tensor_2d = NULL,
    .get_tensor_2d = NULL,
    .cpy_tensor    = reserve_cpy,
    .clear         = reserve_clear,
    .reset         = NULL,
};

// HEAP: real memory; each access is logged (when the device logs) before it is made.

static bool logs(ggml_backend_buffer_t buffer) {
    return ((struct fake_buf *) buffer->context)->dev->desc.log;
}

static void heap_free(ggml_backend_buffer_t buffer) {
    struct fake_buf * fb = buffer->context;
    free(fb->base);
    record_free(fb->dev->reg, fb);
}

static void heap_memset(ggml_backend_buffer_t buffer, struct ggml_tensor * tensor, uint8_t value, size_t offset,
                        size_t size) {
    if (logs(buffer)) {
        printf("  MEMSET %s %s %u %zu %zu\n", buf_name(buffer), tensor->name, (unsigned) value, offset, size);
    }
    memset((char *) tensor->data + offset, value, size);
}

static void heap_set(ggml_backend_buffer_t buffer, struct ggml_tensor * tensor, const void * data, size_t offset,
                     size_t size) {
    if (logs(buffer)) {
        printf("  SET %s %s %zu %zu\n", buf_name(buffer), tensor->name, offset, size);
    }
    memcpy((char *) tensor->data + offset, data, size);
}

static void heap_get(ggml_backend_buffer_t buffer, const struct ggml_tensor * tensor, void * data, size_t offset,
                     size_t size) {
    if (logs(buffer)) {
        printf("  GET %s %s %zu %zu\n", buf_name(buffer), tensor->name, offset, size);
    }
    memcpy(data, (const char *) tensor->data + offset, size);
}

// Copies only from this registry's buffers, whose memory it knows to be host memory.
static bool heap_cpy(ggml_backend_buffer_t buffer, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    const struct fake_reg * reg = ((struct fake_buf *) buffer->context)->dev->reg;
    if (src->buffer == NULL || fake_dev_of_buft(reg, src->buffer->buft) == NULL) {
        return false;
    }
    if (logs(buffer)) {
        printf("  CPY %s %s -> %s %s\n", buf_name(src->buffer), src->name, buf_name(buffer), dst->name);
    }
    memcpy(dst->data, src->data, ggml_nbytes(src));
    return true;
}

static void heap_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    if (logs(buffer)) {
        printf("  CLEAR %s %u\n", buf_name(buffer), (unsigned) value);
    }
    memset(((struct fake_buf *) buffer->context)->base, value, buffer->size);
}

static const struct ggml_backend_buffer_i heap_buffer_i = {
    .free_buffer   = heap_free,
    .get_base      = buf_get_base,
    .init_tensor   = NULL,
    .memset_tensor = heap_memset,
    .set_tensor    = heap_set,
    .get_tensor    = heap_get,
    .set_tensor_2d = NULL,
    .get_tensor_2d = NULL,
    .cpy_tensor    = heap_cpy,
    .clear         = heap_clear,
    .reset         = NULL,
};

// ---------------------------------------------------------------------------------------
// buffer types

static const char * buft_get_name(ggml_backend_buffer_type_t buft) {
    const struct fake_dev * d = dev_of(buft->context);
    return d->desc.buft_name ? d->desc.buft_name : d->desc.name;
}

static ggml_backend_buffer_t buft_alloc_reserve(struct fake_dev * d, ggml_backend_buffer_type_t buft, size_t size) {
    struct fake_buf * fb = record_calloc(d->reg, sizeof(*fb));
    if (fb == NULL) {
        return NULL;
    }
    fb->dev    = d;
    fb->size   = size;
    fb->serial = d->n_bufs++;
    // A zero-size buffer still needs a non-NULL, aligned base: ggml treats NULL as "no memory".
    fb->base = size ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                    : (void *) (uintptr_t) d->desc.alignment;
    if (fb->base == MAP_FAILED) {
        // the programs' figures would be meaningless without the buffer: stop, as loudly as
        // an out-of-memory device would
        fprintf(stderr, "fake_backend %s: mmap of %zu bytes failed\n", d->desc.name, size);
        exit(3);
    }
    return ggml_backend_buffer_init(buft, reserve_buffer_i, fb, size);
}

static ggml_backend_buffer_t buft_alloc_heap(struct fake_dev * d, ggml_backend_buffer_type_t buft, size_t size) {
    size_t            align = d->desc.alignment;
    size_t            bytes = (size + align - 1) / align * align; // aligned_alloc wants a multiple
    struct fake_buf * fb    = record_calloc(d->reg, sizeof(*fb));
    if (fb == NULL) {
        return NULL;
    }
    fb->dev  = d;
    fb->size = size;
    fb->base = aligned_alloc(align, bytes);
    if (fb->base == NULL) {
        record_free(d->reg, fb);
        return NULL;
    }
    fb->serial = d->n_bufs++;
    if (d->desc.log) {
        printf("  ALLOCBUF %s %zu buf=%s#%d\n", buft_get_name(buft), size, buft_get_name(buft), fb->serial);
    }
    return ggml_backend_buffer_init(buft, heap_buffer_i, fb, size);
}

static ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    struct fake_dev * d = dev_of(buft->context);
    return d->desc.alloc == FAKE_ALLOC_RESERVE ? buft_alloc_reserve(d, buft, size) : buft_alloc_heap(d, buft, size);
}

static size_t buft_get_alignment(ggml_backend_buffer_type_t buft) {
    return dev_of(buft->context)->desc.alignment;
}

static bool buft_is_host(ggml_backend_buffer_type_t buft) {
    return dev_of(buft->context)->desc.host;
}

static const struct ggml_backend_buffer_type_i fake_buft_i = {
    .get_name       = buft_get_name,
    .alloc_buffer   = buft_alloc_buffer,
    .get_alignment  = buft_get_alignment,
    .get_max_size   = NULL,
    .get_alloc_size = NULL,
    .is_host        = buft_is_host,
};

// ---------------------------------------------------------------------------------------
// backends: compute nothing

static const char * be_get_name(ggml_backend_t backend) {
    return dev_of(backend->context)->desc.name;
}

static void be_free(ggml_backend_t backend) {
    (void) backend; // static storage
}

static enum ggml_status be_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph) {
    const struct fake_dev * d = dev_of(backend->context);
    if (d->desc.log) {
        int n = ggml_graph_n_nodes(cgraph);
        printf("  RUN %s %d:", d->desc.name, n);
        for (int i = 0; i < n; i++) {
            printf(" %s", ggml_graph_node(cgraph, i)->name);
        }
        printf("\n");
    }
    if (d->desc.on_compute) {
        d->desc.on_compute(d, cgraph);
    }
    return GGML_STATUS_SUCCESS;
}

static void be_graph_optimize(ggml_backend_t backend, struct ggml_cgraph * cgraph,
                              struct ggml_backend_graph_optimize_params * params) {
    (void) params;
    const struct fake_dev * d = dev_of(backend->context);
    d->desc.graph_optimize(d, cgraph);
}

static const struct ggml_backend_i fake_backend_i = {
    .get_name      = be_get_name,
    .free          = be_free,
    .graph_compute = be_graph_compute,
};

// ---------------------------------------------------------------------------------------
// devices

static const char * dev_get_name(ggml_backend_dev_t dev) {
    return dev_of(dev->context)->desc.name;
}

static const char * dev_get_description(ggml_backend_dev_t dev) {
    const struct fake_dev * d = dev_of(dev->context);
    return d->desc.description ? d->desc.description : d->desc.name;
}

static void dev_get_memory(ggml_backend_dev_t dev, size_t * free_mem, size_t * total) {
    *free_mem = dev_of(dev->context)->desc.memory;
    *total    = dev_of(dev->context)->desc.memory;
}

static enum ggml_backend_dev_type dev_get_type(ggml_backend_dev_t dev) {
    return dev_of(dev->context)->desc.type;
}

static void dev_get_props(ggml_backend_dev_t dev, struct ggml_backend_dev_props * props) {
    memset(props, 0, sizeof(*props));
    props->name        = dev_get_name(dev);
    props->description = dev_get_description(dev);
    dev_get_memory(dev, &props->memory_free, &props->memory_total);
    props->type      = dev_get_type(dev);
    props->device_id = NULL;
}

static ggml_backend_t dev_init_backend(ggml_backend_dev_t dev, const char * params) {
    (void) params;
    return &dev_of(dev->context)->backend;
}

static ggml_backend_buffer_type_t dev_get_buffer_type(ggml_backend_dev_t dev) {
    return &dev_of(dev->context)->buft;
}

static bool dev_supports_op(ggml_backend_dev_t dev, const struct ggml_tensor * op) {
    const struct fake_dev * d = dev_of(dev->context);
    return d->desc.supports_op ? d->desc.supports_op(d, op) : true;
}

static bool dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
    const struct fake_dev * d = dev_of(dev->context);
    return d->desc.supports_buft ? d->desc.supports_buft(d, buft) : buft == &d->buft;
}

static bool dev_offload_op(ggml_backend_dev_t dev, const struct ggml_tensor * op) {
    const struct fake_dev * d = dev_of(dev->context);
    return d->desc.offload_op(d, op);
}

static const struct ggml_backend_device_i fake_dev_i = {
    .get_name             = dev_get_name,
    .get_description      = dev_get_description,
    .get_memory           = dev_get_memory,
    .get_type             = dev_get_type,
    .get_props            = dev_get_props,
    .init_backend         = dev_init_backend,
    .get_buffer_type      = dev_get_buffer_type,
    .get_host_buffer_type = NULL,
    .buffer_from_host_ptr = NULL,
    .supports_op          = dev_supports_op,
    .supports_buft        = dev_supports_buft,
    .offload_op           = NULL,
    .event_new            = NULL,
    .event_free           = NULL,
    .event_synchronize    = NULL,
};

// ---------------------------------------------------------------------------------------
// registry

static const char * reg_get_name(ggml_backend_reg_t reg) {
    return ((struct fake_reg *) reg->context)->name;
}

static size_t reg_get_device_count(ggml_backend_reg_t reg) {
    return (size_t) ((struct fake_reg *) reg->context)->n_devs;
}

static ggml_backend_dev_t reg_get_device(ggml_backend_reg_t reg, size_t index) {
    struct fake_reg * r = reg->context;
    return index < (size_t) r->n_devs ? &r->devs[index].dev : NULL;
}

static const struct ggml_backend_reg_i fake_reg_i = {
    .get_name         = reg_get_name,
    .get_device_count = reg_get_device_count,
    .get_device       = reg_get_device,
    .get_proc_address = NULL,
};

void fake_reg_init(struct fake_reg * reg, const char * name) {
    memset(reg, 0, sizeof(*reg));
    reg->name            = name;
    reg->reg.api_version = GGML_BACKEND_API_VERSION;
    reg->reg.iface       = fake_reg_i;
    reg->reg.context     = reg;
}

struct fake_dev * fake_reg_add(struct fake_reg * reg, const struct fake_dev_desc * desc) {
    if (reg->n_devs >= FAKE_MAX_DEV) {
        fprintf(stderr, "fake_backend: more than %d devices\n", FAKE_MAX_DEV);
        abort();
    }
    struct fake_dev * d = &reg->devs[reg->n_devs];
    memset(d, 0, sizeof(*d));
    d->desc  = *desc;
    d->reg   = reg;
    d->index = reg->n_devs++;

    d->buft.iface   = fake_buft_i;
    d->buft.device  = &d->dev;
    d->buft.context = d;

    d->dev.iface = fake_dev_i;
    if (desc->offload_op) {
        d->dev.iface.offload_op = dev_offload_op;
    }
    d->dev.reg     = &reg->reg;
    d->dev.context = d;

    d->backend.guid  = &d->desc.guid;
    d->backend.iface = fake_backend_i;
    if (desc->graph_optimize) {
        d->backend.iface.graph_optimize = be_graph_optimize;
    }
    d->backend.device  = &d->dev;
    d->backend.context = d;
    return d;
}

struct fake_dev * fake_dev_of_buft(const struct fake_reg * reg, ggml_backend_buffer_type_t buft) {
    for (int i = 0; i < reg->n_devs; i++) {
        if (buft == &reg->devs[i].buft) {
            return (struct fake_dev *) &reg->devs[i];
        }
    }
    return NULL;
}

struct fake_dev * fake_dev_of_backend(ggml_backend_t backend) {
    return dev_of(backend->context);
}

int fake_buffer_serial(const struct fake_reg * reg, ggml_backend_buffer_t buffer) {
    // ggml's zero-size dummy buffer has this buffer type but none of its callbacks
    if (buffer == NULL || fake_dev_of_buft(reg, buffer->buft) == NULL || buffer->iface.get_base != buf_get_base ||
        buffer->context == NULL) {
        return -1;
    }
    return ((const struct fake_buf *) buffer->context)->serial;
}
