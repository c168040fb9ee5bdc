/* The pinned ggml headers whose types and declarations the Rust side binds to. */
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-backend-impl.h"
#include "ggml-impl.h"
