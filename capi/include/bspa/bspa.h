/*
 * bspa.h — block-sparse prefix attention: paged KV cache, prefix caching and
 * block-sparse prefill attention behind a plain C99 ABI.
 *
 * This is the only public header. It needs neither CUDA nor C++ to parse; tensors
 * are DLPack DLTensor (dlpack/dlpack.h) and streams are opaque CUstream handles.
 *
 * Conventions (every function follows them unless its comment says otherwise)
 *  - Every fallible function returns a bspa_status; BSPA_OK (0) is success. Besides the
 *    codes each function lists, any of them may return BSPA_ERR_OUT_OF_MEMORY (a host
 *    allocation failed) or BSPA_ERR_INTERNAL (a bug: please report it).
 *  - On failure the thread's last-error message (bspa_last_error) names the argument
 *    and the offending value, and no state changed: a failed call is a no-op.
 *  - Constructors bspa_X_create(bspa_X **out, ...) set *out = NULL on failure.
 *    Destructors accept NULL and never fail.
 *  - Options structs start with `uint32_t version`; fill them with
 *    bspa_X_options_init() and then change fields. A struct whose version is 0
 *    (never initialised) or newer than this library knows is rejected with
 *    BSPA_ERR_VERSION. Within one ABI a struct keeps its size: a new field goes at the
 *    end or into padding, with a new version number; one that needs more room waits for
 *    an ABI bump. The launches' args structs
 *    (bspa_kv_write_args, bspa_prefill_args, bspa_paged_args) work the same way, filled
 *    by bspa_X_args_init.
 *  - Tensors are borrowed: the library never keeps a DLTensor pointer past the call. On
 *    CUDA, bspa_kv_write, bspa_prefill and bspa_prefill_paged are asynchronous: the memory
 *    behind their tensors must stay allocated, and out / lse must not be read or reused,
 *    until the launch has completed on `stream`. On the CPU they return when done.
 *  - Every tensor argument must also satisfy, whatever its shape rules (a violation is
 *    refused before any memory is touched):
 *     - strides (in elements) >= 0;
 *     - data + byte_offset a multiple of the element size (2 bytes for f16/bf16, 4 for
 *       f32/int32), else BSPA_ERR_INVALID_ARGUMENT; the CUDA prefill further needs 16-byte
 *       alignment (see bspa_prefill);
 *     - byte_offset plus the bytes from its first to its last element at most PTRDIFF_MAX,
 *       and not wrapping the address space (BSPA_ERR_SHAPE_MISMATCH for the strides or
 *       shape, BSPA_ERR_INVALID_ARGUMENT for byte_offset);
 *     - an output (out, lse, the paged workspace) has distinct elements: no stride of 0 or
 *       strides that make rows overlap, e.g. out strides {0, 0, 1} (BSPA_ERR_SHAPE_MISMATCH);
 *     - what a call writes shares no byte with what it reads: out and lse are off q, each
 *       other, the K/V pages (the pool's storage, or k_pages/v_pages) and the paged
 *       metadata; k_new and v_new are off the pool's storage (BSPA_ERR_INVALID_ARGUMENT).
 *       Byte ranges are compared whole, from a tensor's first to its last element, so
 *       two strided views that interleave without sharing an element count as overlapping.
 *  - Streams come last; NULL is the default stream; ignored for CPU work.
 *  - No C++ exception or CUDA error ever crosses this ABI.
 *
 * Threading: a pool and its sequences are internally synchronised (any thread, any
 * time), except their destroy functions: bspa_seq_destroy must not overlap another call
 * on the sequence, bspa_pool_destroy none on the pool or anything made from it (likewise
 * bspa_layout_destroy, bspa_batch_destroy and the KV transfer destroys for their objects);
 * layouts are immutable after creation and may be shared freely; a batch is used by one
 * stream (one thread) at a time. Launches that write pages (bspa_kv_write) and launches
 * that read them (another batch over the same sequence, or over pages a commit shared
 * with another sequence) are ordered by the caller, as any writes and reads of memory
 * are: on the CPU, overlapping ones race. bspa_last_error is per thread.
 *
 * Environment (CUDA builds only; read once per process, at the first launch that needs it):
 *  - BSPA_CUDA_PATH = sm80 | sm90 | auto (default): forces the prefill kernel family.
 *    auto runs the warp-specialized wgmma kernel (sm90) on a compute capability 9.0 GPU
 *    when the build carries sm_90a code and some query of the launch is longer than 64
 *    rows, the mma.sync kernel (sm80) otherwise; both give the same results within
 *    rounding. sm90 on another GPU or build is BSPA_ERR_NOT_SUPPORTED; any other value
 *    is BSPA_ERR_NOT_SUPPORTED too.
 *  - BSPA_CUDA_DEBUG = 1: every launch synchronises its stream and checks it, so an
 *    asynchronous fault is reported by the call that caused it (not graph capturable).
 *  - BSPA_CUDA_TMA = 0: the sm90 kernel fetches every K/V tile with cp.async gathers
 *    instead of TMA (by default a whole 64-token tile goes by TMA from pages of 8 tokens
 *    or more: boxes of a page's rows under 64); same results, for comparison and testing.
 *  - BSPA_CUDA_DECODE = 0 | 1..8: no decode kernel, or one for queries of up to N new
 *    tokens only (default 8; see bspa_prefill; other values are ignored); same results
 *    within rounding, for comparison.
 *  - BSPA_CUDA_OVERLAP = 0: a launch with decode rows and longer queries runs its decode
 *    kernel after the prefill kernel has finished instead of beside its last CTAs (compute
 *    capability 9.0); same results, for comparison.
 *  - BSPA_CUDA_DECODE_QUADS = 1 | 2: at most that many quads of four warps a decode CTA
 *    (by default a launch of at most one CTA an SM runs two quads taking alternate key
 *    tiles, and one over e4m3 pages whose one-quad CTAs would leave its last wave mostly
 *    idle runs three); 1 keeps the four-warp CTA, 2 leaves out the three-quad grid; same
 *    results within rounding, for comparison.
 *  - BSPA_CUDA_DECODE_CLUSTER = 0: the key splits of a decode item always merge through
 *    global memory (by default, on compute capability 9.0, a launch of decode rows only
 *    whose grid is one two-quad CTA an SM, and whose items' splits all fit the GPU at once
 *    as thread-block clusters of at most 16 CTAs, merges them inside each cluster); same
 *    results, for comparison.
 *  - BSPA_CUDA_LIST_TILES = 0: the sm90 kernel walks every (sequence, query tile, head)
 *    item of a launch without a work list (bspa_prefill_paged over several sequences)
 *    instead of listing the items that have rows first; for comparison (results equal
 *    within rounding: the split of the last round may differ).
 *  - BSPA_DECODE_SPLITS = 1..1024: the decode kernel splits the keys of each (sequence, KV
 *    head) item that many ways instead of the planned count, where the launch's workspace
 *    holds them (other values are ignored); a diagnostic for benchmarking (results equal
 *    within rounding).
 *  - BSPA_CUDA_MIXED_PREFILL_CTAS = 0..65536: on compute capability 9.0, a launch with
 *    decode rows and longer queries whose two kernels overlap (not BSPA_CUDA_OVERLAP=0)
 *    runs its sm90 prefill kernel on at most that many CTAs (0: one an SM), leaving the
 *    other SMs to its decode kernel from the start. Unset (or another value), a pool
 *    batch's launch under a dense layout over 16-bit pages sizes that share from its plan
 *    (its decode rows' estimated part of the step's time); other launches (sparse layouts,
 *    e4m3 pages, fixed-shape batches, bspa_prefill_paged) take one CTA an SM. The variable
 *    is a diagnostic for benchmarking (results equal within rounding: the split of the
 *    last round may differ).
 *
 * Security: prefix caching shares KV between requests with equal prefixes, which is
 * observable through timing. Sequences of different tenants must use different salts
 * (bspa_seq_options.salt), and the salt must come from the server (a tenant id), never
 * from a request body.
 */
#ifndef BSPA_BSPA_H
#define BSPA_BSPA_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(BSPA_BUILDING_LIBRARY) && defined(__GNUC__)
#define BSPA_API __attribute__((visibility("default")))
#else
#define BSPA_API
#endif

/* ------------------------------------------------------------------------------
 * Versions
 * ---------------------------------------------------------------------------- */

#define BSPA_VERSION_MAJOR 0
#define BSPA_VERSION_MINOR 1
#define BSPA_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define BSPA_VERSION_NUMBER \
  (BSPA_VERSION_MAJOR * 10000 + BSPA_VERSION_MINOR * 100 + BSPA_VERSION_PATCH)
#define BSPA_VERSION_STRING "0.1.0"
/* Moves whenever an existing signature or struct layout changes. Bindings refuse to
 * load a library whose bspa_abi_version() differs from the one they were built for. */
#define BSPA_ABI_VERSION 3

/* The library's BSPA_VERSION_NUMBER, which may differ from the header's. */
BSPA_API uint32_t bspa_version_number(void);
/* Static string, e.g. "0.1.0". Never NULL, never freed. */
BSPA_API const char *bspa_version_string(void);
/* The library's BSPA_ABI_VERSION. */
BSPA_API uint32_t bspa_abi_version(void);
/* Static one-line description of what was compiled in, e.g.
 * "bspa 0.1.0; backends: cpu,cuda; cuda_archs: 80,90a; dtypes: f32,f16,bf16 (cuda: f16,bf16);
 * kv_dtypes: f32,f16,bf16,fp8_e4m3 (cuda: f16,bf16,fp8_e4m3); head_dims: any (cuda: 64,128)".
 * "dtypes" are those of q/out (and of pages of the same dtype); "kv_dtypes" those of pages.
 * Never NULL, never freed. */
BSPA_API const char *bspa_build_info(void);

/* ------------------------------------------------------------------------------
 * Status codes and errors
 * ---------------------------------------------------------------------------- */

typedef int32_t bspa_status;

enum {
  BSPA_OK = 0,

  /* 1xx: the caller passed something invalid. */
  BSPA_ERR_INVALID_ARGUMENT = 100, /* a value out of its documented domain */
  BSPA_ERR_NULL_POINTER = 101,     /* a required pointer was NULL */
  BSPA_ERR_OUT_OF_RANGE = 102,     /* an index (layer, head, page, block) out of range */
  BSPA_ERR_SHAPE_MISMATCH = 103,   /* a tensor's ndim, shape or strides are wrong */
  BSPA_ERR_DTYPE_MISMATCH = 104,   /* a tensor's dtype is wrong */
  BSPA_ERR_DEVICE_MISMATCH = 105,  /* a tensor lives on the wrong device */
  BSPA_ERR_BUFFER_TOO_SMALL = 106, /* an output buffer is too small; the size is reported */
  BSPA_ERR_INVALID_STATE = 107,    /* the call is not valid for the object's current state */

  /* 2xx: valid but not supported by this build or device. */
  BSPA_ERR_NOT_SUPPORTED = 200,
  BSPA_ERR_NO_DEVICE = 201, /* the requested device does not exist on this machine */

  /* 3xx: a resource ran out. */
  BSPA_ERR_OUT_OF_PAGES = 300,  /* the pool has no free or evictable page left */
  BSPA_ERR_OUT_OF_MEMORY = 301, /* host or device allocation failed */

  /* 4xx: the CUDA runtime reported an error. */
  BSPA_ERR_CUDA = 400,

  /* 5xx: version mismatch (options struct, ABI). */
  BSPA_ERR_VERSION = 500,

  /* 9xx: a bug in bspa. Please report it with bspa_last_error() and bspa_build_info(). */
  BSPA_ERR_INTERNAL = 900
};

/* The category of a status: 0 ok, 1 invalid argument, 2 not supported, 3 resource,
 * 4 CUDA, 5 version, 9 internal. */
#define BSPA_STATUS_CATEGORY(s) ((s) / 100)

/* Static name of a status, e.g. "BSPA_ERR_OUT_OF_PAGES"; "BSPA_UNKNOWN_STATUS" for a
 * value this library does not define. Never NULL. */
BSPA_API const char *bspa_status_string(bspa_status status);

/* The message of the last failed call on this thread, naming the argument and the bad
 * value, or "" if no call on this thread has failed. Never NULL. Valid until the next
 * bspa call on this thread. Successful calls do not clear it. */
BSPA_API const char *bspa_last_error(void);

/* ------------------------------------------------------------------------------
 * Common types
 * ---------------------------------------------------------------------------- */

/* A CUDA stream (cudaStream_t). NULL is the legacy default stream. */
typedef struct CUstream_st *bspa_stream;

/* Element types of KV pools and attention tensors. */
typedef int32_t bspa_dtype;
enum {
  BSPA_DTYPE_F32 = 0,
  BSPA_DTYPE_F16 = 1,
  BSPA_DTYPE_BF16 = 2,
  /* FP8 e4m3 ("e4m3fn": no infinities, NaN = 0x7f / 0xff, largest finite 448, subnormals
   * m * 2^-9), for KV pages only: a pool of this dtype stores K and V as one byte per
   * element with fp32 dequantization scales per (layer, KV head), value = scale * e4m3
   * (bspa_pool_set_kv_scales); bspa_prefill_paged takes such pages with scale tensors.
   * Everything else stays 16-bit: k_new / v_new of bspa_kv_write are bf16 or f16
   * (quantized on write), q and out of the attention are bf16 or f16 (one dtype for both),
   * accumulation is fp32. DLPack tensors of e4m3 data carry dtype
   * {BSPA_DL_FLOAT8_E4M3FN, 8, 1} (what torch.float8_e4m3fn exports) or {kDLUInt, 8, 1}
   * (raw bytes, e.g. a numpy uint8 array; the call says what they mean). */
  BSPA_DTYPE_FP8_E4M3 = 3
};

/* DLPack's type code kDLFloat8_e4m3fn (DLPack >= 1.1; the dlpack.h bspa ships predates it). */
#define BSPA_DL_FLOAT8_E4M3FN 10

/* Number of devices of a DLPack device type (kDLCPU: 1; kDLCUDA: visible GPUs, 0 on a
 * machine with no GPU or no driver, or in a build without CUDA).
 * Errors: BSPA_ERR_NULL_POINTER (count), BSPA_ERR_NOT_SUPPORTED (other device types). */
BSPA_API bspa_status bspa_device_count(int32_t device_type, int32_t *count);

/* ------------------------------------------------------------------------------
 * Paged KV pool and prefix cache
 *
 * A pool owns num_pages pages of page_size tokens. For each layer it stores K and V as
 * [num_pages, num_kv_heads, page_size, head_dim] (dense, row-major). Pages are handed
 * to sequences, reference counted, and — once full and committed — published in a
 * prefix index keyed by a chained XXH3-128 hash of (parent key, page tokens, extra key),
 * the first parent derived from the sequence's salt. Every hit is verified against the
 * stored tokens, parent key and extra key, so a hash collision never hands out wrong
 * pages. Unreferenced published pages stay cached in an LRU queue until evicted.
 * ---------------------------------------------------------------------------- */

typedef struct bspa_pool bspa_pool;
typedef struct bspa_seq bspa_seq;

#define BSPA_POOL_OPTIONS_VERSION 2
/* The hash seed used when bspa_pool_options.hash_seed is left at its default. Keys are
 * stable across processes and machines for a given seed. */
#define BSPA_DEFAULT_HASH_SEED UINT64_C(0x62737061b10cca5e)

typedef struct bspa_pool_options {
  uint32_t version;     /* BSPA_POOL_OPTIONS_VERSION (set by bspa_pool_options_init) */
  int32_t device_type;  /* kDLCPU (default) or kDLCUDA */
  int32_t device_id;    /* CUDA device ordinal; 0 for CPU */
  bspa_dtype dtype;     /* element type of K and V (default BSPA_DTYPE_BF16); BSPA_DTYPE_FP8_E4M3
                           halves the bytes of a page (see bspa_pool_set_kv_scales) */
  int32_t num_layers;   /* >= 0; 0 = bookkeeping and prefix lookup only, no KV storage */
  int32_t num_kv_heads; /* >= 1 */
  int32_t head_dim;     /* >= 1 (the CUDA prefill supports 64 and 128) */
  int32_t page_size;    /* tokens per page, a power of two in [16, 256] (default 64) */
  int64_t num_pages;    /* > 0, or 0 to derive it from memory_bytes */
  uint64_t memory_bytes; /* KV storage budget when num_pages == 0 */
  uint64_t hash_seed;   /* default BSPA_DEFAULT_HASH_SEED */
  /* Since version 2: KV cache event records the pool keeps until they are drained
   * (see "KV cache events" below), in [0, INT32_MAX]; 0 (the default) = no events, and
   * then the pool does no event work at all. The queue is reserved at creation:
   * about (64 + 4 * page_size) bytes per record. */
  int64_t events_capacity;
} bspa_pool_options;

/* Fills *options with defaults (CPU, bf16, 1 layer, 1 kv head, head_dim 128, page 64,
 * no pages). Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_pool_options_init(bspa_pool_options *options);

/* Creates a pool. CPU storage is host memory; CUDA storage is one cudaMalloc on
 * options->device_id (an FP8 pool adds one small allocation for its scales, 8 x num_layers
 * x num_kv_heads bytes). The caller owns *pool and frees it with bspa_pool_destroy.
 * Sizes are checked factor by factor: a pool whose KV bytes (num_pages x num_layers x 2
 * x num_kv_heads x page_size x head_dim x element size) exceed PTRDIFF_MAX is
 * BSPA_ERR_INVALID_ARGUMENT (the message shows the factors); a smaller one that the
 * machine cannot allocate is BSPA_ERR_OUT_OF_MEMORY.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_VERSION, BSPA_ERR_INVALID_ARGUMENT (any
 * field out of its domain, or a memory budget too small for one page),
 * BSPA_ERR_NO_DEVICE (kDLCUDA without such a GPU), BSPA_ERR_NOT_SUPPORTED (kDLCUDA in a
 * build without CUDA), BSPA_ERR_OUT_OF_MEMORY. */
BSPA_API bspa_status bspa_pool_create(bspa_pool **pool, const bspa_pool_options *options);

/* Destroys the pool, its storage and every sequence still alive in it (their handles
 * become invalid). Every batch, KV export and KV import made from the pool must be
 * destroyed first (otherwise the behaviour is undefined), and no launch that uses the
 * pool's storage may still be queued or running on a device stream. NULL is a no-op. */
BSPA_API void bspa_pool_destroy(bspa_pool *pool);

/* Fills *k and *v with views of one layer's K and V storage,
 * [num_pages, num_kv_heads, page_size, head_dim], strides NULL (compact row-major).
 * The views' dtype is the pool's; an FP8 pool's is {BSPA_DL_FLOAT8_E4M3FN, 8, 1}.
 * The shape arrays belong to the pool and stay valid until bspa_pool_destroy; the
 * views alias the pool's storage. Either of k, v may be NULL.
 * Errors: BSPA_ERR_NULL_POINTER (pool), BSPA_ERR_OUT_OF_RANGE (layer),
 * BSPA_ERR_INVALID_STATE (a pool with num_layers == 0). */
BSPA_API bspa_status bspa_pool_kv(const bspa_pool *pool, int32_t layer, DLTensor *k, DLTensor *v);

/* A struct without typedef: the function of the same name, bspa_pool_stats, owns the
 * plain identifier. */
struct bspa_pool_stats {
  int64_t pages_total;    /* num_pages */
  int64_t pages_free;     /* unreferenced and never published (used first) */
  int64_t pages_cached;   /* unreferenced but published: evictable, reusable by a match */
  int64_t pages_in_use;   /* referenced by at least one sequence */
  int64_t num_sequences;  /* live sequences */
  uint64_t match_calls;   /* bspa_seq_match calls */
  uint64_t hits;          /* matches that returned at least one cached page */
  uint64_t misses;        /* matches that returned none */
  uint64_t matched_tokens; /* tokens returned as cached by all matches */
  uint64_t queried_tokens; /* prompt tokens passed to all matches */
  uint64_t hashed_tokens; /* tokens hashed (matching and publishing) */
  uint64_t published_pages; /* pages entered into the prefix index */
  uint64_t evictions;     /* cached pages taken back for reuse */
};

/* Snapshot of the pool's counters, consistent at one instant.
 * Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_pool_stats(const bspa_pool *pool, struct bspa_pool_stats *stats);

/* Checks every invariant of the pool (free + cached + in use = total; reference counts
 * equal the live sequences' page lists; prefix index and pages agree; LRU list
 * consistent). O(pages + sequences); for tests and debugging.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INTERNAL (an invariant is broken; the
 * message says which). */
BSPA_API bspa_status bspa_pool_check(const bspa_pool *pool);

/* ------------------------------------------------------------------------------
 * Pool geometry and FP8 scales
 * ---------------------------------------------------------------------------- */

#define BSPA_POOL_INFO_VERSION 1
/* What a pool was made with and what its storage costs. The caller sets `version` (to
 * BSPA_POOL_INFO_VERSION, or the version it was built with); bspa_pool_info fills the
 * fields of that version and leaves the rest of a newer struct alone. */
struct bspa_pool_info {
  uint32_t version;     /* in: BSPA_POOL_INFO_VERSION */
  int32_t device_type;  /* kDLCPU or kDLCUDA */
  int32_t device_id;
  bspa_dtype dtype;     /* element type of the pages (BSPA_DTYPE_FP8_E4M3 for an fp8 pool) */
  int32_t num_layers;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t page_size;
  int64_t num_pages;    /* as created (resolved from memory_bytes when that was given) */
  uint64_t page_bytes;  /* KV bytes of one page over all layers, K and V: num_layers x 2 x
                           num_kv_heads x page_size x head_dim x element size (1 for fp8) */
  uint64_t storage_bytes; /* the KV allocation: num_pages x page_bytes */
  int32_t kv_scales_layers; /* fp8 pools: layers whose scales are set; 0 otherwise */
};

/* Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_VERSION (info->version 0 or newer than this
 * library knows). Any thread, any time. */
BSPA_API bspa_status bspa_pool_info(const bspa_pool *pool, struct bspa_pool_info *info);

/* Sets the fp32 dequantization scales of one layer of a BSPA_DTYPE_FP8_E4M3 pool:
 * k_scales[h] and v_scales[h] for KV head h in [0, n), n == num_kv_heads, host arrays
 * (copied; the caller keeps them). A page element of head h holds e4m3(x / scale[h])
 * (bspa_kv_write) and reads back as scale[h] * e4m3. A common choice is amax / 448 per head
 * from calibration (448 is e4m3's largest finite value); values above 448 * scale saturate.
 * Every layer needs its scales before its first bspa_kv_write or bspa_prefill: a launch on
 * a layer without them fails (BSPA_ERR_INVALID_STATE), it never assumes 1. They may be set
 * again at any time; pages already written keep their bytes and are then read with the new
 * scales. A CUDA pool keeps a device copy ([num_layers][K, V][num_kv_heads] floats,
 * allocated with the pool) that this call updates with a synchronous cudaMemcpy: set scales
 * while no launch on that layer is queued or running (not per step; not during CUDA graph
 * capture). Any thread (the pool is internally synchronised).
 * Errors: BSPA_ERR_NULL_POINTER (pool, k_scales, v_scales), BSPA_ERR_OUT_OF_RANGE (layer),
 * BSPA_ERR_INVALID_ARGUMENT (n != num_kv_heads; a scale that is not finite or not > 0: the
 * message names the layer, head and value), BSPA_ERR_INVALID_STATE (a pool of another
 * dtype), BSPA_ERR_CUDA. On any error the layer keeps its previous scales (or none). */
BSPA_API bspa_status bspa_pool_set_kv_scales(bspa_pool *pool, int32_t layer, const float *k_scales,
                                             const float *v_scales, int32_t n);

/* Copies one layer's scales into k_scales[0, n) and v_scales[0, n) (n == num_kv_heads;
 * either pointer may be NULL to skip it). Any thread.
 * Errors: BSPA_ERR_NULL_POINTER (pool), BSPA_ERR_OUT_OF_RANGE (layer),
 * BSPA_ERR_INVALID_ARGUMENT (n), BSPA_ERR_INVALID_STATE (a pool of another dtype, or a
 * layer whose scales were never set). */
BSPA_API bspa_status bspa_pool_get_kv_scales(const bspa_pool *pool, int32_t layer, float *k_scales, float *v_scales,
                                             int32_t n);

#define BSPA_SEQ_OPTIONS_VERSION 1
typedef struct bspa_seq_options {
  uint32_t version;   /* BSPA_SEQ_OPTIONS_VERSION */
  const void *salt;   /* tenant isolation: copied; salt_len 0 = no salt, whether salt is
                         NULL or not (its bytes are then not read) */
  size_t salt_len;
  uint64_t extra_key; /* mixed into every page key, e.g. a LoRA adapter id; default 0 */
} bspa_seq_options;

/* Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_seq_options_init(bspa_seq_options *options);

/* Creates an empty sequence in the pool. options may be NULL (no salt, extra key 0).
 * The sequence belongs to the pool: destroy it with bspa_seq_destroy, or it is freed
 * with the pool. Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_VERSION,
 * BSPA_ERR_INVALID_ARGUMENT (salt NULL with salt_len > 0). */
BSPA_API bspa_status bspa_seq_create(bspa_seq **seq, bspa_pool *pool, const bspa_seq_options *options);

/* Looks up the longest cached page-aligned prefix of tokens[0..n) — at most
 * floor((n-1)/page_size)*page_size tokens, so the last prompt token is always
 * computed — pins those pages and makes them the sequence's first pages. Afterwards
 * the sequence holds *cached tokens, all computed. A miss is not an error
 * (*cached = 0). Only valid on an empty sequence. The tokens are copied.
 * Errors: BSPA_ERR_NULL_POINTER (seq, cached, or tokens with n > 0),
 * BSPA_ERR_INVALID_ARGUMENT (n < 0), BSPA_ERR_INVALID_STATE (sequence not empty). */
BSPA_API bspa_status bspa_seq_match(bspa_seq *seq, const int32_t *tokens, int64_t n, int64_t *cached);

/* Appends tokens[0..n) after the tokens the sequence holds and reserves pages for them
 * (matched pages are never displaced; free never-published pages are used first, then
 * the least recently used cached pages are evicted). All or nothing: on
 * BSPA_ERR_OUT_OF_PAGES the sequence, the pool and every count are unchanged.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INVALID_ARGUMENT (n < 0),
 * BSPA_ERR_OUT_OF_PAGES. */
BSPA_API bspa_status bspa_seq_append(bspa_seq *seq, const int32_t *tokens, int64_t n);

/* Declares that tokens [0, computed) hold valid KV. Every page that is then full is
 * published to the prefix index (if an identical page is already published, the
 * existing one stays the index entry). computed may not decrease.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INVALID_ARGUMENT (computed below the current
 * computed count or above the number of tokens). */
BSPA_API bspa_status bspa_seq_commit(bspa_seq *seq, int64_t computed);

/* Copies the sequence's page ids, in token order, into pages[0..capacity) and sets
 * *num_pages to the count. Call with pages NULL and capacity 0 to learn the count (that
 * call returns BSPA_OK).
 * Errors: BSPA_ERR_NULL_POINTER (seq, num_pages, or pages with capacity > 0),
 * BSPA_ERR_INVALID_ARGUMENT (capacity < 0), BSPA_ERR_BUFFER_TOO_SMALL (pages given and
 * capacity below the count; *num_pages holds the count needed, pages is untouched). */
BSPA_API bspa_status bspa_seq_pages(const bspa_seq *seq, int32_t *pages, int64_t capacity, int64_t *num_pages);

/* A struct without typedef, like struct bspa_pool_stats. */
struct bspa_seq_info {
  int64_t num_tokens;   /* tokens held (matched + appended) */
  int64_t num_computed; /* tokens with valid KV */
  int64_t num_cached;   /* tokens that came from the prefix cache in bspa_seq_match */
  int64_t num_pages;    /* pages held */
};

/* Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_seq_info(const bspa_seq *seq, struct bspa_seq_info *info);

/* Releases the sequence's pages, last page first (so chain tails are evicted before
 * heads); published pages stay cached. NULL is a no-op. */
BSPA_API void bspa_seq_destroy(bspa_seq *seq);

/* ------------------------------------------------------------------------------
 * KV cache events
 *
 * A pool made with bspa_pool_options.events_capacity > 0 records, in the order its
 * prefix index changes (across threads: recorded under the pool's lock), one event per
 * page that enters the index ("stored", in bspa_seq_commit) and per published page that
 * leaves it ("removed": evicted for reuse, in bspa_seq_append). A KV-aware router
 * (NVIDIA Dynamo's, llm-d's) mirrors the index from them. Nothing is called back: the
 * runtime drains the queue when it likes, e.g. once per engine step, as structured
 * events (bspa_pool_events_drain) or as one msgpack batch in vLLM's wire format
 * (bspa_pool_events_drain_msgpack) for a ZMQ publisher to send unchanged.
 *
 * When a record does not fit, the pool drops the queue's contents, records one
 * "all cleared" event and empties its prefix index (cached pages become free; pages in
 * use stay with their sequences but are no longer published), so a router that rebuilds
 * from the events that follow holds exactly what the pool can match. A sequence (or KV
 * import) whose published pages the clear took publishes its chain again from its first
 * page at its next commit, so no stored event names a parent from before the clear (a queue
 * shorter than that chain leaves the rest unpublished). Size the queue for the pages
 * published and evicted between two drains.
 *
 * Block ids: a page's stay in the index is named block_id = (generation << 32) | page,
 * where the generation counts how often the page was handed out: unique over the pool's
 * life, never 0, the same for a page from its "stored" to its "removed". A stored page
 * names its parent by the parent's block_id (0: the first page of a chain; its salt then
 * stands for the parent). The page key (key_lo, key_hi) is the prefix index's own.
 * ---------------------------------------------------------------------------- */

enum {
  BSPA_KV_EVENT_STORED = 1,     /* a page entered the prefix index */
  BSPA_KV_EVENT_REMOVED = 2,    /* a published page left it (evicted) */
  BSPA_KV_EVENT_ALL_CLEARED = 3 /* the queue overflowed: forget everything before */
};

typedef struct bspa_kv_event {
  int32_t type;             /* BSPA_KV_EVENT_* */
  int32_t page;             /* the pool's page id (stored, removed); -1 for all cleared */
  uint64_t block_id;        /* stored, removed: see above; 0 for all cleared */
  uint64_t parent_block_id; /* stored: the parent's block_id, 0 for a chain's first page */
  uint64_t key_lo;          /* stored: the page key, low and high 64 bits */
  uint64_t key_hi;
  uint64_t extra_key;       /* stored: the sequence's bspa_seq_options.extra_key */
  int64_t token_offset;     /* stored: its page_size tokens are tokens[token_offset ..) of
                             * the drain's token buffer; -1 otherwise */
  const void *salt;         /* stored: the sequence's salt, owned by the pool and valid
                             * until bspa_pool_destroy; NULL (salt_len 0) without salt */
  size_t salt_len;
} bspa_kv_event;

/* Moves every queued event into events[0, capacity) and the stored pages' tokens into
 * tokens[0, token_capacity), oldest first, and sets *num_events and *num_tokens to their
 * counts; the queue is then empty. With events and tokens NULL and both capacities 0 it
 * only reports the counts (BSPA_OK, nothing drained). Any thread, any time.
 * Errors: BSPA_ERR_NULL_POINTER (pool, num_events, num_tokens; events or tokens NULL
 * with a capacity > 0), BSPA_ERR_INVALID_ARGUMENT (a negative capacity),
 * BSPA_ERR_INVALID_STATE (a pool made with events_capacity 0), BSPA_ERR_BUFFER_TOO_SMALL
 * (a buffer below its count; *num_events and *num_tokens hold the counts needed, nothing
 * is drained or lost). */
BSPA_API bspa_status bspa_pool_events_drain(bspa_pool *pool, bspa_kv_event *events, int64_t capacity,
                                            int32_t *tokens, int64_t token_capacity, int64_t *num_events,
                                            int64_t *num_tokens);

/* Moves every queued event into buffer[0, capacity) as one msgpack-encoded vLLM
 * EventBatch, [ts, [event...], dp_rank] (dp_rank < 0 is written as nil), the bytes
 * vLLM's msgspec encoder writes for the same events (vllm/distributed/kv_events.py,
 * tagged-map events): consecutive stored pages of one chain share a "BlockStored" map,
 * consecutive removals a "BlockRemoved", an overflow is "AllBlocksCleared"; block_hashes
 * are block ids, "lora_id" is the extra key (nil when 0), "medium" is "GPU" (the pool:
 * the tier attention reads, whatever its device), "block_size" the page size. A salted
 * sequence's pages also carry "cache_salt": the salt, or "bspa-hex:" and the salt in
 * lowercase hex when it is not valid UTF-8. That key is not vLLM's (vLLM puts the salt
 * into extra_keys, which routers ignore); NVIDIA Dynamo's KV router reads it (checked with
 * ai-dynamo-runtime 1.6.1) and mixes it into its block hash seed, so the pages of one
 * tenant match only queries made with the same cache salt (Dynamo: nvext.cache_salt, or
 * cache_salt in its indexer's /query). Dynamo ignores lora_id: pages that differ only in
 * extra key look alike to it. Every "BlockStored" ends with "kv_cache_dtype", the pool's
 * element type as vLLM's --kv-cache-dtype and torch spell it ("bfloat16", "float16",
 * "float32", "fp8_e4m3"): not a vLLM key either (vLLM's and Dynamo's decoders skip it), so
 * that a router or a KV transfer can tell an fp8 worker's pages from a 16-bit one's. The
 * structured events of bspa_pool_events_drain leave it out: they come from one pool, whose
 * dtype bspa_pool_info reports. Send the buffer as the payload frame of a ZMQ PUB message
 * (topic, 8-byte big-endian sequence number from 0, payload). *size is set to the batch's
 * bytes; with buffer NULL and capacity 0 it only reports that size (BSPA_OK, nothing
 * drained). An empty queue gives a batch with no events. Any thread, any time.
 * Errors: BSPA_ERR_NULL_POINTER (pool, size; buffer NULL with capacity > 0),
 * BSPA_ERR_INVALID_ARGUMENT (ts not finite), BSPA_ERR_INVALID_STATE (a pool made with
 * events_capacity 0), BSPA_ERR_BUFFER_TOO_SMALL (capacity below the batch; *size holds
 * the bytes needed, nothing is drained or lost; events recorded before the next call can
 * make it larger still). */
BSPA_API bspa_status bspa_pool_events_drain_msgpack(bspa_pool *pool, double ts, int32_t dp_rank, void *buffer,
                                                    size_t capacity, size_t *size);

/* ------------------------------------------------------------------------------
 * Block-sparse layouts
 *
 * A layout says which key blocks each query block of each (local) head may see. The
 * token rule: the query at absolute position p sees the key at position j iff
 * j <= p and allowed(head, p / block_size, j / block_size). Layouts are immutable.
 * ---------------------------------------------------------------------------- */

typedef struct bspa_layout bspa_layout;

#define BSPA_LAYOUT_STRIDED_OPTIONS_VERSION 1
/* Phi-3-small's local + vertical-stride rule, evaluated analytically (no mask is built):
 *   allowed(h, qb, kb) = kb <= qb and (qb - kb < local_blocks or (kb + g*s + 1) % vert_stride == 0)
 * with g = head_begin + h the global head index and
 * s = homo_head ? 0 : max(1, vert_stride / num_heads_total). */
typedef struct bspa_layout_strided_options {
  uint32_t version;        /* BSPA_LAYOUT_STRIDED_OPTIONS_VERSION */
  int32_t block_size;      /* tokens per block (default 64) */
  int32_t local_blocks;    /* >= 1 (default 16) */
  int32_t vert_stride;     /* 1..2^30 (default 8) */
  int32_t homo_head;       /* 0 = heterogeneous heads (default), 1 = all heads alike */
  int32_t num_heads_total; /* query heads over all tensor-parallel ranks, 1..2^24 (default 32) */
  int32_t head_begin;      /* this rank's first global head (default 0) */
  int32_t num_heads;       /* this rank's query heads (default 32) */
} bspa_layout_strided_options;

/* Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_layout_strided_options_init(bspa_layout_strided_options *options);
/* Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_VERSION, BSPA_ERR_INVALID_ARGUMENT. */
BSPA_API bspa_status bspa_layout_create_strided(bspa_layout **layout, const bspa_layout_strided_options *options);
/* Dense causal over num_heads heads. Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INVALID_ARGUMENT. */
BSPA_API bspa_status bspa_layout_create_dense(bspa_layout **layout, int32_t num_heads);
/* A caller's own layout in per-head CSR form over num_block_rows query blocks.
 * crow: [num_heads][num_block_rows + 1] offsets into col, absolute, non-decreasing
 * across heads (head h's row r holds col[crow[h][r] .. crow[h][r+1]) and
 * crow[h][0] == crow[h-1][num_block_rows], crow[0][0] == 0). col: key block indices,
 * strictly ascending within a row, each <= its row, and every row holds its own
 * diagonal block (so every query sees at least itself). Both arrays are copied.
 * Queries beyond num_block_rows * block_size tokens are rejected by the prefill (on
 * CUDA over device metadata, bspa_prefill_paged cannot see them: see its errors).
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INVALID_ARGUMENT (the message names the
 * first bad head, row and entry). */
BSPA_API bspa_status bspa_layout_create_csr(bspa_layout **layout, int32_t num_heads, int32_t block_size,
                                            int32_t num_block_rows, const int32_t *crow, const int32_t *col);
/* *allowed = 1 if query block q_block of local head `head` may see key block k_block.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_OUT_OF_RANGE (head, negative blocks, or a
 * CSR row past num_block_rows). */
BSPA_API bspa_status bspa_layout_allowed(const bspa_layout *layout, int32_t head, int64_t q_block,
                                         int64_t k_block, int32_t *allowed);
/* NULL is a no-op. */
BSPA_API void bspa_layout_destroy(bspa_layout *layout);

/* ------------------------------------------------------------------------------
 * Batches and prefill
 * ---------------------------------------------------------------------------- */

typedef struct bspa_batch bspa_batch;

/* Plans one engine step: sequence i computes query_lens[i] new tokens, the ones at
 * positions [computed_i, computed_i + query_lens[i]) where computed_i is its
 * num_computed; they must already be appended. Token rows of q/k_new/v_new/out are the
 * sequences' new tokens concatenated in order (T_new = sum of query_lens). A
 * query_len of 0 is allowed; 1 is a decode row. The batch snapshots the sequences'
 * page tables and holds a reference to each sequence until bspa_batch_destroy: a
 * sequence destroyed while a batch of it lives keeps all its pages out of reuse (they
 * count as in use; they are released with the last batch that holds it), so launches
 * through the batch touch only those pages, never another sequence's. The reference costs
 * one count per sequence, not per page. Snapshot means snapshot: a later append, commit or match of a sequence is
 * not seen by the batch. n is at most the pool's live sequences. For a CUDA pool it
 * uploads its metadata on `stream` asynchronously: launch the batch on `stream`, or order
 * the launch's stream after it. Later launches neither allocate nor synchronise,
 * except the first use of a CSR layout on a device (see bspa_prefill). Where a launch
 * of the batch may split work across SMs (see bspa_prefill_workspace_bytes: the Hopper
 * prefill's last round when fewer than 8 rounds of (128-row query tile, KV head) items
 * fill the SMs, or the decode rows' key ranges when their (sequence, KV head) items do
 * not fill the GPU), the batch also allocates that workspace (about 27 MB for head_dim
 * 128 on an H200; left out, and the launches do not split, when the device has no room).
 * That is one reason its launches must not overlap (one stream at a time).
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INVALID_ARGUMENT (n < 1 or more than the
 * pool's live sequences, negative query_len, a sequence of another pool, the same
 * sequence twice), BSPA_ERR_OUT_OF_RANGE
 * (computed + query_len past the sequence's tokens), BSPA_ERR_INVALID_STATE (a pool
 * without KV storage), BSPA_ERR_CUDA, BSPA_ERR_OUT_OF_MEMORY. */
BSPA_API bspa_status bspa_batch_create(bspa_batch **batch, bspa_pool *pool, bspa_seq *const *seqs,
                                       const int32_t *query_lens, int32_t n, bspa_stream stream);
/* Releases the batch's page references (pages of sequences destroyed meanwhile become
 * free or cached then). Waits for nothing; the caller must make sure no launch using the
 * batch is still running on a device stream. NULL is a no-op. */
BSPA_API void bspa_batch_destroy(bspa_batch *batch);

/* Reusable batches: plan every step into the same buffers (FlashInfer's plan / run split).
 * A reusable batch is sized once from limits: for a CUDA pool it allocates its device
 * metadata arrays, two pinned host staging buffers and the split workspace (see
 * bspa_prefill_workspace_bytes) at creation and frees them only in bspa_batch_destroy, so a
 * step's bspa_batch_plan and launches neither allocate, free nor synchronise device memory
 * (bspa_device_allocation_counts shows it), and the launches read their plan from fixed
 * device addresses. That is what lets a runtime capture a step's launches (bspa_kv_write and
 * bspa_prefill of every layer) in a CUDA graph once per batch-size bucket and replay it for
 * later steps after re-planning: see fixed_launch_shape. */
#define BSPA_BATCH_OPTIONS_VERSION 2
typedef struct bspa_batch_options {
  uint32_t version;      /* BSPA_BATCH_OPTIONS_VERSION (bspa_batch_options_init) */
  /* Sequences a plan may hold, >= 1 (required), with max_tokens + 2 * max_seqs <= INT32_MAX;
   * on a CUDA pool at most 65535 (a launch's grid), and with fixed_launch_shape
   * max_tokens / 128 + 2 * max_seqs <= 32767 (its padded work list's query tiles). */
  int32_t max_seqs;
  int32_t max_query_len; /* new tokens of one sequence, 0..max_tokens; 0 (default) = max_tokens */
  int64_t max_tokens;    /* new tokens of a step (sum of query_lens), 1..INT32_MAX (required) */
  /* Tokens (computed + new) one sequence may have at planning, 1..INT32_MAX (required; a
   * plan past it is BSPA_ERR_OUT_OF_RANGE, to the token): sizes the device block table (max_seqs rows of ceil(max_seq_tokens / page_size) pages,
   * at most the pool's num_pages). */
  int64_t max_seq_tokens;
  /* 0 (default): each launch is sized by its step, as a one-step batch's (fastest eager
   * launches; a graph captured from one replays only that same plan). 1: every launch is
   * sized by the limits alone — grids for max_seqs sequences and max_tokens rows, the decode
   * key split chosen for max_seqs sequences of max_seq_tokens, rows and sequences the step
   * lacks skipped on the device — so a CUDA graph captured after any plan replays correctly
   * after any later plan of the same batch. Then q, out, k_new and v_new have exactly
   * max_tokens rows (lse max_tokens columns) in every launch, of which the step's new tokens
   * are the first T_new; the rows past them are neither read nor written. Eager launches of
   * such a batch compute exactly what its replays compute (bitwise); outside stream capture
   * they leave out a kernel with none of the step's rows (the prefill kernel of a step of
   * decode rows only, the decode kernel of one without them), so an eager step costs what a
   * one-step batch's does, while a capture holds every kernel the limits may route rows to:
   * both, unless max_query_len is at most the launch's decode bound (8 on CUDA, lowered by
   * BSPA_CUDA_DECODE, the GQA group, the device's shared memory and max_decode_query_len
   * below; 0 where the decode kernel is off), whose capture then holds the decode kernel
   * alone. So capture plain decode steps in buckets of decode rows only (max_query_len 1):
   * a mixed bucket's replay of a decode step also launches the prefill kernel, which finds
   * no work (bench/bench_step, the 32-layer step's rows). */
  int32_t fixed_launch_shape;
  /* Since version 2, in what was tail padding (the struct keeps its size); optional (0,
   * the default: no bound of the caller's): the longest query among the sequences the
   * caller treats as decode rows (1 for plain decode, 1 + k with k speculative tokens), as
   * bspa_paged_args.max_decode_query_len. On CUDA it lowers the decode bound (8, or what
   * BSPA_CUDA_DECODE and the GQA group allow) to itself when smaller: sequences with
   * 1..bound new tokens take the decode kernel, longer ones the prefill kernel. Plans see
   * every query length, so only fixed_launch_shape batches need it for speed: their decode
   * tile is otherwise sized for the bound or max_query_len, whichever is smaller (a mixed
   * bucket's graph sizes it for 8 new tokens). A hint: every value is correct; a
   * sequence's kernel decides its rounding. The CPU ignores it. Negative:
   * BSPA_ERR_INVALID_ARGUMENT. */
  int32_t max_decode_query_len;
} bspa_batch_options;

/* Sets every field to its default (version set, limits 0: set max_seqs, max_tokens and
 * max_seq_tokens). Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_batch_options_init(bspa_batch_options *options);
/* Creates a reusable batch of `pool` with no plan yet (launches through it are
 * BSPA_ERR_INVALID_STATE until its first bspa_batch_plan). The caller owns *batch and frees
 * it with bspa_batch_destroy, which for a CUDA pool frees device and pinned memory
 * (cudaFree synchronises the device: destroy at shutdown, not per step).
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_VERSION, BSPA_ERR_INVALID_ARGUMENT (a limit out of
 * its range, named with its value), BSPA_ERR_INVALID_STATE (a pool without KV storage),
 * BSPA_ERR_OUT_OF_MEMORY, BSPA_ERR_CUDA. */
BSPA_API bspa_status bspa_batch_create_reusable(bspa_batch **batch, bspa_pool *pool,
                                                const bspa_batch_options *options);
/* Replaces a reusable batch's plan with one of the step given, with bspa_batch_create's
 * meaning of seqs, query_lens and n (snapshot, page references) and its errors. The new plan
 * is written to a pinned staging buffer and copied to the batch's device buffers by one
 * cudaMemcpyAsync on `stream`; launches queued on `stream` before the call still see the
 * previous plan (stream order), launches queued after see this one. So plan and launch a
 * batch on one stream (or order the streams yourself). The page references of the previous
 * plan are released here: their pages may then be reused by later calls, whose writes are
 * ordered after the previous step's launches only on the same stream. The call waits for
 * the copy of the plan before the previous one to have executed (the staging buffers are
 * used in turn), never for launches. It must not be called while `stream` is capturing a
 * graph (BSPA_ERR_INVALID_STATE, checked before anything touches the device, so the
 * capture goes on: the copy is the part a replay must not repeat); capture the launches
 * after planning, then for each later step plan and replay. That wait is a
 * synchronisation: while another thread captures a graph in cudaStreamCaptureModeGlobal
 * (PyTorch's default), plan on a thread that is not capturing only if that capture is in
 * cudaStreamCaptureModeThreadLocal or Relaxed mode, or CUDA ends the other capture with an
 * error. What may change
 * between replays of a graph captured from a fixed_launch_shape batch: the sequences, their
 * number (up to max_seqs), context lengths, query lengths (up to max_query_len, total up to
 * max_tokens), page tables, which rows are decode rows; what may not: the batch, the pool,
 * the layout, the tensors' addresses and strides, the layer and the scale (they are
 * arguments captured in the graph). A step past a limit is refused here
 * (BSPA_ERR_OUT_OF_RANGE naming the limit), never computed wrongly; a failed call keeps the
 * previous plan and its pages. One thread at a time per batch.
 * Errors: those of bspa_batch_create, plus BSPA_ERR_INVALID_ARGUMENT (a one-step batch),
 * BSPA_ERR_OUT_OF_RANGE (past max_seqs, max_query_len, max_tokens or max_seq_tokens),
 * BSPA_ERR_INVALID_STATE (stream capturing). */
BSPA_API bspa_status bspa_batch_plan(bspa_batch *batch, bspa_seq *const *seqs, const int32_t *query_lens,
                                     int32_t n, bspa_stream stream);
/* Process-wide counts of the device and pinned-host allocations bspa has made and freed
 * (cudaMalloc, cudaHostAlloc, their frees), so a runtime or a test can check that its steady
 * state allocates nothing. Any thread. Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_device_allocation_counts(uint64_t *allocations, uint64_t *frees);

/* Writes the new tokens' K and V, [T_new, num_kv_heads, head_dim] of the pool's dtype
 * on the pool's device (last dimension contiguous; other strides free), into their
 * pages of `layer`. An FP8 pool takes bf16 or f16 k_new / v_new (both the same dtype)
 * and stores e4m3(x / scale[h]) rounded to nearest even, finite values past +-448 and
 * +-inf saturated to +-448, NaN kept as NaN (0x7f / 0xff), the sign of zero kept; the
 * layer's scales must be set (BSPA_ERR_INVALID_STATE otherwise). k_new and v_new must not overlap the pool's storage (any layer, K
 * or V; e.g. views from bspa_pool_kv): the write would copy a row over itself.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_OUT_OF_RANGE (layer),
 * BSPA_ERR_SHAPE_MISMATCH, BSPA_ERR_DTYPE_MISMATCH, BSPA_ERR_DEVICE_MISMATCH,
 * BSPA_ERR_INVALID_ARGUMENT (batch of another pool, overlap with the pool's storage,
 * misaligned data), BSPA_ERR_INVALID_STATE (an FP8 pool's layer without scales, or a
 * reusable batch never planned), BSPA_ERR_CUDA. */
#define BSPA_KV_WRITE_ARGS_VERSION 1
typedef struct bspa_kv_write_args {
  uint32_t version; /* BSPA_KV_WRITE_ARGS_VERSION */
  int32_t layer;
  const DLTensor *k_new;
  const DLTensor *v_new;
} bspa_kv_write_args;
/* Fills *args with this header's version, layer 0 and NULL tensors.
 * Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_kv_write_args_init(bspa_kv_write_args *args);
/* args: filled by bspa_kv_write_args_init, then its fields set; borrowed for the call
 * only (neither args nor its tensors are kept), so one struct may be reused and changed
 * between calls (e.g. per layer); it may live on any thread's stack, and the batch's
 * rule (one stream at a time) is unchanged. A future version may add fields at the end
 * only (e.g. per-launch options); a struct of an older version keeps working, its
 * missing fields read as their defaults. Errors: as above, plus
 * BSPA_ERR_NULL_POINTER (args NULL; k_new or v_new NULL: the message names the field as
 * "k_new" / "v_new") and BSPA_ERR_VERSION (args->version 0, never initialised, or newer
 * than this library knows). */
BSPA_API bspa_status bspa_kv_write(bspa_pool *pool, const bspa_batch *batch, const bspa_kv_write_args *args,
                                   bspa_stream stream);

/* Block-sparse causal attention of the batch's new tokens over each sequence's cached
 * prefix plus themselves, reading K/V of `layer` from the pool (write them first with
 * bspa_kv_write). q and out: [T_new, Hq, head_dim] of the pool's dtype on its device
 * (for an FP8 pool: both bf16 or both f16; the pages are dequantized with the layer's
 * scales, which must be set, else BSPA_ERR_INVALID_STATE), last dimension contiguous; Hq == layout's head count and a multiple of
 * num_kv_heads (query head h reads kv head h / (Hq / num_kv_heads)). scale multiplies
 * the logits (Phi-3-small: 1/128). lse, optional: [Hq, T_new] float32, the natural log
 * of each row's softmax denominator of scaled logits. Accumulation is fp32.
 * Range: every logit scale * (q . k) must be finite in fp32 (|x| < 3.4e38). The softmax
 * subtracts each row's maximum, so any finite logits give exact results; a row where one
 * overflows (e.g. q and k entries near 1e19 in f32 or bf16; f16 inputs cannot reach it
 * with a scale <= 1) gets NaN in out and lse, without an error (detecting it would cost a
 * pass over the inputs).
 * CUDA routing: the rows of sequences with 1..8 new tokens (decode, speculative
 * verification) run on a decode kernel that computes the rows of all query heads of a
 * KV group together, so each K/V page is read once per KV head, with key ranges split
 * across SMs when the rows do not fill the GPU; longer queries run on the prefill
 * kernels. The decode kernel takes at most 64 rows (new tokens x Hq / num_kv_heads):
 * with larger groups it takes fewer new tokens (q <= 64 / group; none above 64 query
 * heads per KV head), and on GPUs with less than about 120 KB of shared memory per block
 * (sm86, sm89) head_dim 128 rows stay on the prefill kernels. A mixed batch launches both on `stream` from this one call. Results are the
 * same function either way (within rounding); BSPA_CUDA_DECODE=0 in the environment
 * (read once per process) sends every row to the prefill kernels, BSPA_CUDA_DECODE=N
 * (1..8) only the rows of sequences with up to N new tokens to the decode kernel.
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_OUT_OF_RANGE (layer; a CSR layout shorter
 * than a sequence), BSPA_ERR_SHAPE_MISMATCH (also: out or lse with overlapping rows),
 * BSPA_ERR_DTYPE_MISMATCH, BSPA_ERR_DEVICE_MISMATCH, BSPA_ERR_INVALID_ARGUMENT
 * (non-finite scale, batch of another pool, out or lse overlapping q, each other or the
 * pool's storage, misaligned data), BSPA_ERR_NOT_SUPPORTED (what the CUDA kernels lack: f32, a head_dim other than
 * 64 and 128, a non-power-of-two page size, a non-dense layout whose block_size is not a
 * multiple of 64, data not 16-byte aligned or strides not multiples of 8 elements (16
 * for FP8 pages), a scale <= 0), BSPA_ERR_INVALID_STATE (an FP8 pool's layer without scales; and
 * see below), BSPA_ERR_CUDA.
 * CUDA: a CSR layout's arrays are copied to a device on its first use there (one
 * allocation and a synchronous copy, freed with the layout); that first use is refused
 * with BSPA_ERR_INVALID_STATE while `stream` is capturing a CUDA graph, so launch once
 * before capturing. Strided and dense layouts need no device copy. */
#define BSPA_PREFILL_ARGS_VERSION 1
typedef struct bspa_prefill_args {
  uint32_t version; /* BSPA_PREFILL_ARGS_VERSION */
  int32_t layer;
  const bspa_layout *layout;
  const DLTensor *q;
  DLTensor *out;
  DLTensor *lse; /* optional, [Hq, T_new] float32 */
  float scale;
} bspa_prefill_args;
/* Fills *args with this header's version, layer 0, NULL layout and tensors, scale 1.
 * Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_prefill_args_init(bspa_prefill_args *args);
/* args: filled by bspa_prefill_args_init, then its fields set; borrowed for the call
 * only (neither args nor its tensors are kept), so one struct may be reused and changed
 * between calls (e.g. per layer); it may live on any thread's stack, and the batch's
 * rule (one stream at a time) is unchanged. A future version may add fields at the end
 * only (e.g. per-launch FP8 scales or a workspace, as bspa_paged_args grew them); a
 * struct of an older version keeps working, its missing fields read as their defaults.
 * Errors: as above, plus BSPA_ERR_NULL_POINTER (args NULL; layout, q or out NULL: the
 * message names the field as "layout" / "q" / "out"), BSPA_ERR_VERSION (args->version 0,
 * never initialised, or newer than this library knows) and BSPA_ERR_INVALID_STATE (a
 * reusable batch never planned). */
BSPA_API bspa_status bspa_prefill(bspa_pool *pool, const bspa_batch *batch, const bspa_prefill_args *args,
                                  bspa_stream stream);

/* Bytes of the optional bspa_paged_args.workspace for launches on a device of
 * `device_type` (kDLCPU or kDLCUDA) and `device_id` with `head_dim`: 0 where no launch
 * uses one (CPU; a head_dim the CUDA kernels lack), about 27 MB for head_dim 128 on an
 * H200. With it, a CUDA launch splits key ranges across SMs where its work would leave
 * SMs idle, and merges the parts: the Hopper prefill's last round of (query tile, head)
 * items (e.g. a short query over a long prefix), and decode rows whose (sequence, KV
 * head) items do not fill the GPU (e.g. few sequences with long contexts; figures in
 * bench/NOTES.md). Results agree within rounding either way. A Hopper prefill launch that
 * splits first clears its counters (under 1 KB of the workspace) with cudaMemsetAsync
 * on its stream, which a CUDA graph captures like the kernel; a decode split likewise
 * clears one counter per (sequence, KV head) of the launch first (with cudaMemsetAsync
 * when the launch also has longer queries, else with a one-CTA kernel that the decode
 * kernel overlaps on compute capability 9.0), and the last CTA of each item merges the
 * item's parts (no second kernel). A batch's own workspace (bspa_prefill with a batch) is
 * cleared once when the batch is made and left clear by every launch: its launches clear
 * nothing. A launch with both decode rows and longer queries runs its decode kernel
 * alongside the prefill's last CTAs on compute capability 9.0 (programmatic dependent
 * launch; everything after the call on the stream still follows both); the two kernels
 * always use their own parts of the workspace. Replays of graphs that
 * share a workspace must not overlap. Any thread; the answer is fixed per device and
 * head_dim.
 * Errors: BSPA_ERR_NULL_POINTER (bytes), BSPA_ERR_INVALID_ARGUMENT (head_dim <= 0),
 * BSPA_ERR_NO_DEVICE (no such CUDA device), BSPA_ERR_NOT_SUPPORTED (other device types),
 * BSPA_ERR_CUDA. */
BSPA_API bspa_status bspa_prefill_workspace_bytes(int32_t device_type, int32_t device_id, int32_t head_dim,
                                                  size_t *bytes);

#define BSPA_PAGED_ARGS_VERSION 4
/* Bring-your-own cache: the same attention over caller-owned pages. All tensors live
 * on one device (the integer metadata too).
 *  k_pages, v_pages: [num_pages, num_kv_heads, page_size, head_dim], any strides with
 *    the last dimension contiguous.
 *  block_table: int32 [num_seqs, max_pages_per_seq]; sequence i's token t lives in page
 *    block_table[i][t / page_size] at slot t % page_size.
 *  query_starts: int32 [num_seqs + 1], rows of q/out, query_starts[0] == 0.
 *  context_lens: int32 [num_seqs], tokens before the new ones; sequence i has
 *    context_lens[i] + (query_starts[i+1] - query_starts[i]) tokens in its pages,
 *    the new tokens' K/V included.
 *  max_query_len: an upper bound of the query lengths (sizes the CUDA grid). On CUDA,
 *    with the decode bound (8, lowered by max_decode_query_len below, by BSPA_CUDA_DECODE,
 *    and to 64 / group for GQA groups over 8; 0 where the device lacks the decode kernel's
 *    shared memory), a max_query_len at most the bound sends every row to the decode
 *    kernel (its key split sized from the block table's width); above the bound with
 *    several sequences, both the prefill and the decode kernel are launched (the metadata
 *    stays on the device), each skipping the other's sequences; above it with one
 *    sequence, only the prefill kernel. (Pool batches route exactly: bspa_batch_create
 *    sees the lengths.) On compute capability 9.0 the prefill kernel of such a launch
 *    lists the query tiles of the sequences with more new tokens than the bound on the
 *    device and walks only those, so decode sequences and a loose bound
 *    cost it little; with over 128 such sequences (or 65535 tiles) it walks every
 *    (sequence, tile) of the grid instead, empty ones included.
 *  max_decode_query_len (since version 4): which sequences count as decode rows, as
 *    vLLM's metadata says (1 for plain decode, 1 + k with k speculative tokens).
 *  FP8 pages (since version 3): k_pages and v_pages of dtype {BSPA_DL_FLOAT8_E4M3FN, 8, 1}
 *    or {kDLUInt, 8, 1} hold e4m3 (BSPA_DTYPE_FP8_E4M3); q and out are then bf16 or f16
 *    (one dtype), and k_scale / v_scale are required. */
typedef struct bspa_paged_args {
  uint32_t version; /* BSPA_PAGED_ARGS_VERSION */
  const DLTensor *q;
  DLTensor *out;
  DLTensor *lse; /* optional, [Hq, T_new] float32 */
  const DLTensor *k_pages;
  const DLTensor *v_pages;
  const DLTensor *block_table;
  const DLTensor *query_starts;
  const DLTensor *context_lens;
  int32_t max_query_len;
  /* Since version 4, in what was padding on 64-bit targets (the struct keeps its size and
   * every other offset, so a binary built against an older header that calls this
   * library's bspa_paged_args_init is not written past its end); optional (0, the default:
   * no bound of the caller's): the longest query among the sequences the caller treats as
   * decode rows. On CUDA it lowers the decode bound (max_query_len above) to itself when
   * it is smaller: sequences with 1..bound new tokens take the decode kernel, whose query
   * tile the bound sizes, and longer ones the prefill kernel (a launch of one such
   * sequence runs the prefill kernel only); 0 or a value of 8 and over leaves the bound as
   * it was. Over device metadata the launch cannot see the query lengths, so a mixed
   * launch (max_query_len over 8) sizes the decode tile for 8 new tokens unless told
   * less: a step of plain decode rows beside a prefill chunk gains from 1 (measured
   * through BSPA_CUDA_DECODE=1, which sets the same bound for a whole process:
   * bench/NOTES.md, "Engine step", session 11). A hint, never a promise: any value gives a
   * correct result; a sequence's kernel decides its rounding (results within the
   * documented tolerance, not bitwise equal across values). The CPU backend has no decode
   * kernel and ignores it. Negative: BSPA_ERR_INVALID_ARGUMENT. */
  int32_t max_decode_query_len;
  const bspa_layout *layout;
  float scale;
  /* Since version 2; optional (NULL): device scratch, uint8 [n] on the tensors' device,
   * 16-byte aligned, n >= bspa_prefill_workspace_bytes (a smaller one splits less or not
   * at all). Needs no initialisation; its contents are the launch's until the launch
   * completes on `stream`, so launches that share it must not overlap. */
  DLTensor *workspace;
  /* Since version 3: the dequantization scales of FP8 pages, float32 [num_kv_heads]
   * (compact) each, on the tensors' device: element x of KV head h reads as
   * k_scale[h] * e4m3(x) (v_scale for V). Required with FP8 pages, NULL otherwise. On CPU
   * every scale must be finite and > 0 (BSPA_ERR_INVALID_ARGUMENT naming the head and
   * value); on CUDA the values are the caller's responsibility (the launch does not read
   * device memory back to the host). Read by the launch only while it runs on `stream`. */
  const DLTensor *k_scale;
  const DLTensor *v_scale;
} bspa_paged_args;

/* Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_paged_args_init(bspa_paged_args *args);
/* Errors: as bspa_prefill, plus BSPA_ERR_VERSION (version 0 or past
 * BSPA_PAGED_ARGS_VERSION; a caller built against an older header passes its own version
 * and the library reads only that version's fields); BSPA_ERR_INVALID_ARGUMENT for a
 * negative max_query_len or max_decode_query_len; for k_scale / v_scale:
 * BSPA_ERR_NULL_POINTER (missing with FP8 pages, or NULL data), BSPA_ERR_INVALID_ARGUMENT
 * (given with pages that are not FP8; a bad value on CPU), BSPA_ERR_SHAPE_MISMATCH,
 * BSPA_ERR_DTYPE_MISMATCH, BSPA_ERR_DEVICE_MISMATCH; for the workspace:
 * BSPA_ERR_SHAPE_MISMATCH, BSPA_ERR_DTYPE_MISMATCH, BSPA_ERR_DEVICE_MISMATCH,
 * BSPA_ERR_NULL_POINTER (NULL data) and BSPA_ERR_INVALID_ARGUMENT (not 16-byte aligned,
 * a requirement of the argument, not a kernel limit; overlapping any other argument);
 * BSPA_ERR_INVALID_ARGUMENT when out or lse overlaps k_pages, v_pages or the metadata
 * tensors; BSPA_ERR_SHAPE_MISMATCH when block_table.shape[0] exceeds INT32_MAX. On every
 * device, q rows with no sequence at all (block_table with 0 rows) or with max_query_len
 * 0 are BSPA_ERR_OUT_OF_RANGE. The metadata's values: on CPU each is checked
 * (BSPA_ERR_OUT_OF_RANGE naming it); on CUDA the launch does not read device memory back
 * to the host and trusts them, so keeping them is the caller's part: query_starts[0] == 0,
 * non-decreasing, query_starts[num_seqs] == q.shape[0]; every query length at most
 * max_query_len; context_lens >= 0 and context + query length <= INT32_MAX; each
 * sequence's pages within block_table's width and their ids in [0, k_pages.shape[0]); a
 * CSR layout covering every sequence's tokens. Past them a CUDA launch computes wrongly:
 * rows of out left unwritten, rows of a sequence past a CSR layout's end as 0 with lse
 * -inf, or (a query_starts past q.shape[0], or decreasing) writes outside out and lse.
 * Any thread; concurrent calls are safe when their out, lse and workspace are distinct. */
BSPA_API bspa_status bspa_prefill_paged(const bspa_paged_args *args, bspa_stream stream);

/* ------------------------------------------------------------------------------
 * KV transfer between pools (disaggregated serving: NIXL, or any transport)
 *
 * Pages move between pools of different processes or machines (a prefill engine's and a
 * decode engine's, or two engines sharing prefixes) by a transport the runtime drives:
 * NIXL (ai-dynamo/nixl, what vLLM's NixlConnector, NVIDIA Dynamo and llm-d use), RDMA,
 * or a plain copy. bspa moves no bytes and links no transport; it describes its memory
 * and guards the pages:
 *
 *  1. Both sides read bspa_pool_memory: the storage's address and the place of every
 *     (layer, K/V, page), and a fingerprint. They exchange fingerprints (the runtime's
 *     handshake) and refuse a peer whose fingerprint differs: its pages would not mean the
 *     same here. Register the storage with the transport once (one region, or one per
 *     (layer, K/V) as vLLM does).
 *  2. The exporter pins the prompt's cached pages (bspa_kv_export_create) and sends their
 *     page ids and keys, with the prompt's tokens, to the importer.
 *  3. The importer reserves pages for the blocks it lacks (bspa_kv_import_create): the
 *     leading blocks it already holds are pinned and not moved; the rest get fresh pages,
 *     unpublished, so no sequence can match them yet.
 *  4. The transport copies, for each reserved block b and each (layer, K/V), page_bytes
 *     from the exporter's page of block b to the importer's reserved page of block b.
 *  5. The importer commits (bspa_kv_import_commit: the pages enter its prefix index with
 *     their keys, verified against the tokens like any page a sequence publishes; its next
 *     bspa_seq_match of the prompt hits them) or, when the transfer failed, aborts
 *     (bspa_kv_import_abort: they go back to the free list unpublished, nothing is lost or
 *     published). The exporter then destroys its export (the pages stay cached).
 *
 * Keys and salts: pages are found by the same chained keys as bspa_seq_match, so both
 * sides pass the prompt's salt and extra key (bspa_seq_options), and pages of one salt never
 * serve another. Export and import hold page references like sequences (bspa_pool_check
 * counts them; pages_in_use includes them); they change no stats counter except through
 * what they do: a reservation that has to evict cached pages counts evictions (those pages
 * stay evicted after an abort; a reservation takes free pages first), commit counts
 * published_pages; neither counts as a match nor in hashed_tokens. With events enabled,
 * commit records "stored" events and evictions "removed" ones, as sequences do.
 * Ownership: the caller owns each export and import and destroys it before the pool.
 * Threading: like sequences (any thread; the pool's lock guards them).
 * ---------------------------------------------------------------------------- */

/* The storage layout version bspa_pool_memory describes (below); part of the fingerprint. */
#define BSPA_KV_LAYOUT_VERSION 1

/* Which half of a layer's storage: keys or values. */
enum { BSPA_KV_K = 0, BSPA_KV_V = 1 };

#define BSPA_POOL_MEMORY_VERSION 1
/* A pool's KV memory for transports. One allocation of num_regions regions of equal size,
 * region r = 2 x layer + (BSPA_KV_K or BSPA_KV_V), back to back from `base`; each region is
 * that layer's K or V, [num_pages, num_kv_heads, page_size, head_dim] row-major, so the bytes
 * of page p in region r are [base + (r x num_pages + p) x page_bytes, + page_bytes).
 * The fingerprint is a 64-bit XXH3 digest (never 0) of everything that must match for a
 * page of one pool to be a valid page of another: the layout version, dtype, num_layers,
 * num_kv_heads, head_dim, page_size, the page-key scheme (its version, key width, hash seed:
 * keys of the same tokens and salt are then equal on both sides) and, for FP8 pools, which
 * layers have scales and their values (set them before reading it: bspa_pool_set_kv_scales
 * changes it). Not the device (CPU and CUDA pages hold the same bytes) nor num_pages.
 * The caller sets `version`; fields of newer versions are left alone. */
struct bspa_pool_memory {
  uint32_t version;      /* in: BSPA_POOL_MEMORY_VERSION */
  int32_t device_type;   /* kDLCPU (host memory: NIXL "DRAM") or kDLCUDA (device memory: "VRAM") */
  int32_t device_id;     /* the CUDA ordinal; 0 for CPU */
  int32_t num_regions;   /* 2 x num_layers; 0 for a pool without storage */
  uint64_t base;         /* address of region 0 (the storage), 256-byte aligned; 0 without storage */
  uint64_t bytes;        /* num_regions x region_bytes */
  uint64_t region_bytes; /* num_pages x page_bytes */
  uint64_t page_bytes;   /* bytes of one page in one region: num_kv_heads x page_size x head_dim x
                            element size (what one transfer descriptor moves) */
  int64_t num_pages;
  uint64_t fingerprint;
  uint32_t layout_version; /* BSPA_KV_LAYOUT_VERSION */
};

/* Fills *memory. The addresses stay valid until bspa_pool_destroy (the storage never moves).
 * Any thread, any time.
 * Errors: BSPA_ERR_NULL_POINTER (pool, memory), BSPA_ERR_VERSION (memory->version 0 or newer
 * than this library knows). */
BSPA_API bspa_status bspa_pool_memory(const bspa_pool *pool, struct bspa_pool_memory *memory);

/* *address = the first byte of page `page` of layer `layer`'s K (kv = BSPA_KV_K) or V
 * (BSPA_KV_V); page_bytes (bspa_pool_memory) from there are that page. The same arithmetic
 * as bspa_pool_memory's, checked. Any thread.
 * Errors: BSPA_ERR_NULL_POINTER (pool, address), BSPA_ERR_OUT_OF_RANGE (layer, page),
 * BSPA_ERR_INVALID_ARGUMENT (kv), BSPA_ERR_INVALID_STATE (a pool without storage). */
BSPA_API bspa_status bspa_pool_page_address(const bspa_pool *pool, int32_t layer, int32_t kv, int64_t page,
                                            uint64_t *address);

typedef struct bspa_kv_export bspa_kv_export;

/* Pins every full page of tokens[0, n) that the pool holds as the prompt's cached prefix:
 * the longest chain of whole pages that bspa_seq_match would find, without its n-1 cap (a
 * prompt of exactly k pages exports k). Partial last pages are never exported. A miss is not
 * an error (an export of 0 pages). options: the prompt's salt and extra key as its sequences
 * use them (NULL: none). The pins keep the pages from being evicted or written by this pool
 * until bspa_kv_export_destroy; the transport reads them meanwhile. The tokens are not kept.
 * The caller owns *exp. Any thread.
 * Errors: BSPA_ERR_NULL_POINTER (exp, pool, tokens with n > 0), BSPA_ERR_INVALID_ARGUMENT
 * (n < 0; salt NULL with salt_len > 0), BSPA_ERR_VERSION (options). */
BSPA_API bspa_status bspa_kv_export_create(bspa_kv_export **exp, bspa_pool *pool, const bspa_seq_options *options,
                                           const int32_t *tokens, int64_t n);

/* Copies the exported pages in block order: pages[i] is block i's page id (tokens
 * [i x page_size, (i+1) x page_size)), keys[2i], keys[2i+1] its key (low and high 64 bits:
 * the prefix index's key, as in KV cache events), for i < *num_pages. Either array may be
 * NULL (not wanted); both NULL with capacity 0 asks only for the count. The importer passes
 * tokens[0, *num_pages x page_size) and these keys to bspa_kv_import_create.
 * Errors: BSPA_ERR_NULL_POINTER (exp, num_pages), BSPA_ERR_INVALID_ARGUMENT (capacity < 0),
 * BSPA_ERR_BUFFER_TOO_SMALL (an array given and capacity below the count; *num_pages holds
 * the count, the arrays are untouched). */
BSPA_API bspa_status bspa_kv_export_pages(const bspa_kv_export *exp, int32_t *pages, uint64_t *keys, int64_t capacity,
                                          int64_t *num_pages);

/* Releases the pins (the pages stay cached, evictable). Call it when the transport has
 * finished reading (or given up). NULL is a no-op. */
BSPA_API void bspa_kv_export_destroy(bspa_kv_export *exp);

typedef struct bspa_kv_import bspa_kv_import;

#define BSPA_KV_IMPORT_OPTIONS_VERSION 1
typedef struct bspa_kv_import_options {
  uint32_t version;          /* BSPA_KV_IMPORT_OPTIONS_VERSION */
  const void *salt;          /* the prompt's salt and extra key, as in bspa_seq_options */
  size_t salt_len;
  uint64_t extra_key;
  uint64_t peer_fingerprint; /* required: the exporting pool's bspa_pool_memory.fingerprint */
  const uint64_t *peer_keys; /* optional (NULL): the exporter's keys, num_peer_keys x {lo, hi} */
  int64_t num_peer_keys;     /* n / page_size when peer_keys is given, else 0 */
} bspa_kv_import_options;

/* Errors: BSPA_ERR_NULL_POINTER. */
BSPA_API bspa_status bspa_kv_import_options_init(bspa_kv_import_options *options);

/* Reserves pages for the full pages (blocks) of tokens[0, n) that this pool lacks, first
 * checking that options->peer_fingerprint equals this pool's fingerprint and, when
 * options->peer_keys is given, that each equals the key this pool computes for its block
 * (the tokens, salt and extra key are then the exporter's). The leading blocks the pool
 * already holds as a cached prefix are pinned and need no transfer; blocks
 * [num_cached, num_blocks) get pages that are taken like a sequence's new pages (free ones
 * first, then evicting the least recently used cached ones), hold the tokens, stay
 * unpublished (no sequence can match them) and are the transport's to write until commit or
 * abort (bspa_kv_import_pages says which). All or nothing: on any error nothing changed.
 * The caller owns *imp; bspa_kv_import_destroy aborts an open reservation. Any thread.
 * Errors: BSPA_ERR_NULL_POINTER (imp, pool, options, tokens with n > 0, peer_keys NULL with
 * num_peer_keys > 0), BSPA_ERR_VERSION (options), BSPA_ERR_INVALID_ARGUMENT (n < 0; salt NULL
 * with salt_len > 0; a peer_fingerprint that differs from this pool's, 0 included: the
 * message shows both; num_peer_keys other than n / page_size; a peer key that differs: the
 * message names the block), BSPA_ERR_OUT_OF_PAGES (fewer free and evictable pages than blocks
 * to reserve). */
BSPA_API bspa_status bspa_kv_import_create(bspa_kv_import **imp, bspa_pool *pool, const int32_t *tokens, int64_t n,
                                           const bspa_kv_import_options *options);

/* Copies the reserved pages, in block order: pages[i] is the page to write block blocks[i]
 * into (blocks[i] = num_cached + i), for i < *num_pages (= num_reserved). Either array may
 * be NULL; both NULL with capacity 0 asks only for the count.
 * Errors: BSPA_ERR_NULL_POINTER (imp, num_pages), BSPA_ERR_INVALID_ARGUMENT (capacity < 0),
 * BSPA_ERR_INVALID_STATE (committed or aborted: it holds no pages), BSPA_ERR_BUFFER_TOO_SMALL
 * (as bspa_kv_export_pages). */
BSPA_API bspa_status bspa_kv_import_pages(const bspa_kv_import *imp, int32_t *pages, int64_t *blocks,
                                          int64_t capacity, int64_t *num_pages);

enum { BSPA_KV_IMPORT_RESERVED = 1, BSPA_KV_IMPORT_COMMITTED = 2, BSPA_KV_IMPORT_ABORTED = 3 };

#define BSPA_KV_IMPORT_INFO_VERSION 1
/* The caller sets `version`; fields of newer versions are left alone. */
struct bspa_kv_import_info {
  uint32_t version;      /* in: BSPA_KV_IMPORT_INFO_VERSION */
  int32_t state;         /* BSPA_KV_IMPORT_* */
  int64_t num_blocks;    /* full pages of the prompt: n / page_size */
  int64_t num_cached;    /* leading blocks the pool already held (pinned until commit or abort) */
  int64_t num_reserved;  /* num_blocks - num_cached: the pages to transfer */
  int64_t num_published; /* after commit: reserved pages that entered the prefix index (one
                            whose identical page another sequence published meanwhile is freed
                            instead, the other page serving the chain) */
};

/* Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_VERSION (info->version 0 or too new). */
BSPA_API bspa_status bspa_kv_import_info(const bspa_kv_import *imp, struct bspa_kv_import_info *info);

/* The transport has written every reserved page (K and V of every layer): publishes them
 * in block order with their keys, each verified against its tokens and parent as a
 * sequence's bspa_seq_commit does, and releases every page the import holds (published
 * pages become cached, evictable). The pool's next bspa_seq_match of the prompt hits all
 * num_blocks blocks (up to its n-1 cap). *published (optional, may be NULL) = pages that
 * entered the index. bspa cannot see whether the bytes arrived: commit only after the
 * transport reported every transfer complete, or abort.
 * Errors: BSPA_ERR_NULL_POINTER (imp), BSPA_ERR_INVALID_STATE (already committed or aborted). */
BSPA_API bspa_status bspa_kv_import_commit(bspa_kv_import *imp, int64_t *published);

/* The transfer failed or was cancelled: releases every page; the reserved ones go back to
 * the free list unpublished, the pinned ones stay cached; pages_free, pages_cached,
 * pages_in_use and every counter are as before the reservation (except evictions it made).
 * The transport must not write the pages any more. A second abort is a no-op (BSPA_OK).
 * Errors: BSPA_ERR_NULL_POINTER, BSPA_ERR_INVALID_STATE (already committed). */
BSPA_API bspa_status bspa_kv_import_abort(bspa_kv_import *imp);

/* Aborts an open reservation, then frees the import. NULL is a no-op. */
BSPA_API void bspa_kv_import_destroy(bspa_kv_import *imp);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BSPA_BSPA_H */
