/* SWIG interface over bspa.h: the raw C ABI as module bspa._bspa. The pure-Python
 * package (bspa/__init__.py and friends) is the user API; this layer only converts
 * arguments. Functions return their bspa_status first, then their out-parameters:
 * `status, pool = bspa_pool_create(options)`. */
%module(package="bspa") _bspa

%{
#include <bspa/bspa.h>
#include <dlpack/dlpack.h>
%}

%include <stdint.i>
%include <typemaps.i>

/* The DLPack codes the package uses (device types, element type codes), from dlpack.h, so
 * the Python side has no copy of them. */
%constant int kDLCPU = kDLCPU;
%constant int kDLCUDA = kDLCUDA;
%constant int kDLCUDAManaged = kDLCUDAManaged;
%constant int kDLInt = kDLInt;
%constant int kDLUInt = kDLUInt;
%constant int kDLFloat = kDLFloat;
%constant int kDLBfloat = kDLBfloat;

/* The structs share their names with the functions that fill them. */
%rename(bspa_pool_stats_t, %$isclass) bspa_pool_stats;
%rename(bspa_seq_info_t, %$isclass) bspa_seq_info;
%rename(bspa_pool_info_t, %$isclass) bspa_pool_info;
%rename(bspa_pool_memory_t, %$isclass) bspa_pool_memory;
%rename(bspa_kv_import_info_t, %$isclass) bspa_kv_import_info;
/* Wrapped by bspa_py_seq_create below: a raw const void * salt is unusable from Python. */
%ignore bspa_seq_options::salt;

/* ---- opaque handles returned through T **out ---------------------------------- */
%define BSPA_HANDLE_OUT(TYPE)
%typemap(in, numinputs=0) TYPE **(TYPE *tmp = NULL) { $1 = &tmp; }
%typemap(argout) TYPE ** {
  %append_output(SWIG_NewPointerObj(SWIG_as_voidptr(*$1), $*1_descriptor, 0));
}
%enddef
BSPA_HANDLE_OUT(bspa_pool)
BSPA_HANDLE_OUT(bspa_seq)
BSPA_HANDLE_OUT(bspa_layout)
BSPA_HANDLE_OUT(bspa_batch)
BSPA_HANDLE_OUT(bspa_kv_export)
BSPA_HANDLE_OUT(bspa_kv_import)

/* ---- scalar out-parameters ------------------------------------------------------- */
%apply int32_t *OUTPUT { int32_t *count, int32_t *allowed };
%apply int64_t *OUTPUT { int64_t *cached, int64_t *num_pages };
%apply size_t *OUTPUT { size_t *bytes };
%apply unsigned long long *OUTPUT { uint64_t *address };
%apply int64_t *OUTPUT { int64_t *published };
/* bspa_device_allocation_counts: `status, allocations, frees = ...()`. */
%apply unsigned long long *OUTPUT { uint64_t *allocations, uint64_t *frees };

/* ---- host arrays through the buffer protocol (numpy arrays, array.array, bytes) -- */
%{
/* Borrows a C-contiguous buffer whose items are `itemsize` bytes; `writable` asks for
 * a writable one. Returns 0 and sets a Python exception on failure. */
static int bspa_py_get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable,
                              const char *what) {
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) != 0) return 0;
  if (view->itemsize != itemsize) {
    PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd (format '%s')", what, itemsize,
                 view->itemsize, view->format ? view->format : "B");
    PyBuffer_Release(view);
    return 0;
  }
  return 1;
}
%}

/* const int32_t * (query lengths, CSR arrays): any int32 buffer; None is NULL. The
 * pure-Python layer checks lengths, since the C function trusts them. */
%typemap(in) const int32_t * (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    if (!bspa_py_get_buffer($input, &view, 4, 0, "$1_name")) SWIG_fail;
    have = 1;
    $1 = ($1_ltype)view.buf;
  }
}
%typemap(freearg) const int32_t * { if (have$argnum) PyBuffer_Release(&view$argnum); }
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) const int32_t * {
  $1 = $input == Py_None || PyObject_CheckBuffer($input);
}

/* const float * (an FP8 pool's scales in): any float32 buffer. The pure-Python layer
 * checks its length against n. */
%typemap(in) const float * (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    if (!bspa_py_get_buffer($input, &view, 4, 0, "$1_name")) SWIG_fail;
    have = 1;
    $1 = ($1_ltype)view.buf;
  }
}
%typemap(freearg) const float * { if (have$argnum) PyBuffer_Release(&view$argnum); }
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) const float * {
  $1 = $input == Py_None || PyObject_CheckBuffer($input);
}
/* float *k_scales, float *v_scales (scales out): writable float32 buffers, or None. */
%define BSPA_FLOAT_OUT(NAME)
%typemap(in) float *NAME (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    if (!bspa_py_get_buffer($input, &view, 4, 1, "NAME")) SWIG_fail;
    have = 1;
    $1 = ($1_ltype)view.buf;
  }
}
%typemap(freearg) float *NAME { if (have$argnum) PyBuffer_Release(&view$argnum); }
%enddef
BSPA_FLOAT_OUT(k_scales)
BSPA_FLOAT_OUT(v_scales)

/* (tokens, n): the count comes from the buffer. */
%typemap(in) (const int32_t *tokens, int64_t n) (Py_buffer view, int have = 0) {
  if (!bspa_py_get_buffer($input, &view, 4, 0, "tokens")) SWIG_fail;
  have = 1;
  $1 = (int32_t *)view.buf;
  $2 = (int64_t)(view.len / 4);
}
%typemap(freearg) (const int32_t *tokens, int64_t n) { if (have$argnum) PyBuffer_Release(&view$argnum); }

/* (pages, capacity): a writable int32 buffer, or None for a size query. */
%typemap(in) (int32_t *pages, int64_t capacity) (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
    $2 = 0;
  } else {
    if (!bspa_py_get_buffer($input, &view, 4, 1, "pages")) SWIG_fail;
    have = 1;
    $1 = (int32_t *)view.buf;
    $2 = (int64_t)(view.len / 4);
  }
}
%typemap(freearg) (int32_t *pages, int64_t capacity) { if (have$argnum) PyBuffer_Release(&view$argnum); }

/* bspa_seq *const *seqs: a buffer of uintptr_t handle addresses (int(handle)). */
%typemap(in) bspa_seq *const * (Py_buffer view, int have = 0) {
  if (!bspa_py_get_buffer($input, &view, (Py_ssize_t)sizeof(void *), 0, "seqs")) SWIG_fail;
  have = 1;
  $1 = ($1_ltype)view.buf;
}
%typemap(freearg) bspa_seq *const * { if (have$argnum) PyBuffer_Release(&view$argnum); }
%typemap(argout) bspa_seq *const * ""  /* an input, unlike bspa_seq ** */

/* ---- DLTensor: a DLPack capsule ("dltensor", not consumed: the producer's capsule
 * destructor frees it), an integer address of a DLTensor (ctypes-built over numpy
 * memory), or None (NULL). The caller keeps the object alive across the call. ------ */
%{
static int bspa_py_tensor(PyObject *obj, DLTensor **out) {
  if (obj == Py_None) {
    *out = NULL;
    return 1;
  }
  if (PyCapsule_CheckExact(obj)) {
    DLManagedTensor *managed = (DLManagedTensor *)PyCapsule_GetPointer(obj, "dltensor");
    if (!managed) return 0; /* wrong name or already consumed: the exception is set */
    *out = &managed->dl_tensor;
    return 1;
  }
  if (PyLong_Check(obj)) {
    *out = (DLTensor *)PyLong_AsVoidPtr(obj);
    return !PyErr_Occurred();
  }
  PyErr_SetString(PyExc_TypeError, "expected a DLPack capsule, a DLTensor address or None");
  return 0;
}
%}
%typemap(in) DLTensor *, const DLTensor * {
  DLTensor *tensor = NULL;
  if (!bspa_py_tensor($input, &tensor)) SWIG_fail;
  $1 = ($1_ltype)tensor;
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) DLTensor *, const DLTensor * {
  $1 = $input == Py_None || PyCapsule_CheckExact($input) || PyLong_Check($input);
}
/* Members of bspa_paged_args read back as integer addresses. */
%typemap(out) DLTensor *, const DLTensor * { $result = PyLong_FromVoidPtr((void *)$1); }

/* ---- streams: an integer cudaStream_t or None ---------------------------------- */
%typemap(in) bspa_stream {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    $1 = (bspa_stream)PyLong_AsVoidPtr($input);
    if (PyErr_Occurred()) SWIG_fail;
  }
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) bspa_stream {
  $1 = $input == Py_None || PyLong_Check($input);
}

/* (buffer, capacity): a writable byte buffer (bytearray, numpy uint8), or None for a
 * size query; *size comes back as an output. */
%typemap(in) (void *buffer, size_t capacity) (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
    $2 = 0;
  } else {
    if (!bspa_py_get_buffer($input, &view, 1, 1, "buffer")) SWIG_fail;
    have = 1;
    $1 = view.buf;
    $2 = (size_t)view.len;
  }
}
%typemap(freearg) (void *buffer, size_t capacity) { if (have$argnum) PyBuffer_Release(&view$argnum); }
%apply size_t *OUTPUT { size_t *size };
/* Structured events carry pointers into the pool; Python takes the msgpack batch instead. */
%ignore bspa_pool_events_drain;
%ignore bspa_kv_event;

/* KV transfer: the raw functions take option structs of pointers and output arrays that
 * Python cannot build; bspa_py_kv_* below take buffers instead. */
%ignore bspa_kv_export_create;
%ignore bspa_kv_export_pages;
%ignore bspa_kv_import_create;
%ignore bspa_kv_import_pages;
%ignore bspa_kv_import_options;
%ignore bspa_kv_import_options_init;

/* The header's function-like and UINT64_C macros are not for SWIG. */
%ignore BSPA_DEFAULT_HASH_SEED;
%constant uint64_t BSPA_DEFAULT_HASH_SEED = BSPA_DEFAULT_HASH_SEED;

%include <bspa/bspa.h>

/* ---- helpers for what the raw ABI cannot express in Python ---------------------- */
%typemap(in) (const void *salt, size_t salt_len) (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
    $2 = 0;
  } else {
    if (!bspa_py_get_buffer($input, &view, 1, 0, "salt")) SWIG_fail;
    have = 1;
    $1 = view.buf;
    $2 = (size_t)view.len;
  }
}
%typemap(freearg) (const void *salt, size_t salt_len) { if (have$argnum) PyBuffer_Release(&view$argnum); }

/* Page lists of the KV transfer helpers: writable buffers of their item size, or None. */
%define BSPA_BUFFER_ARG(TYPE, NAME, SIZE, WRITABLE)
%typemap(in) TYPE NAME (Py_buffer view, int have = 0) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    if (!bspa_py_get_buffer($input, &view, SIZE, WRITABLE, "NAME")) SWIG_fail;
    have = 1;
    $1 = ($1_ltype)view.buf;
  }
}
%typemap(freearg) TYPE NAME { if (have$argnum) PyBuffer_Release(&view$argnum); }
%enddef
BSPA_BUFFER_ARG(int32_t *, pages_out, 4, 1)
BSPA_BUFFER_ARG(void *, keys_out, 8, 1)
BSPA_BUFFER_ARG(int64_t *, blocks_out, 8, 1)
BSPA_BUFFER_ARG(const void *, peer_keys_in, 8, 0)

%inline %{
/* bspa_seq_create with the salt given as bytes (copied by the library). */
bspa_status bspa_py_seq_create(bspa_seq **seq, bspa_pool *pool, const void *salt, size_t salt_len,
                               uint64_t extra_key) {
  bspa_seq_options options;
  bspa_status status = bspa_seq_options_init(&options);
  if (status != BSPA_OK) {
    *seq = NULL;
    return status;
  }
  options.salt = salt;
  options.salt_len = salt_len;
  options.extra_key = extra_key;
  return bspa_seq_create(seq, pool, &options);
}

/* KV transfer with the salt as bytes and page lists as buffers. */
bspa_status bspa_py_kv_export_create(bspa_kv_export **exp, bspa_pool *pool, const void *salt, size_t salt_len,
                                     uint64_t extra_key, const int32_t *tokens, int64_t n) {
  bspa_seq_options options;
  bspa_status status = bspa_seq_options_init(&options);
  if (status != BSPA_OK) {
    *exp = NULL;
    return status;
  }
  options.salt = salt;
  options.salt_len = salt_len;
  options.extra_key = extra_key;
  return bspa_kv_export_create(exp, pool, &options, tokens, n);
}

bspa_status bspa_py_kv_import_create(bspa_kv_import **imp, bspa_pool *pool, const int32_t *tokens, int64_t n,
                                     const void *salt, size_t salt_len, uint64_t extra_key,
                                     uint64_t peer_fingerprint, const void *peer_keys_in,
                                     int64_t num_peer_keys) {
  bspa_kv_import_options options;
  bspa_status status = bspa_kv_import_options_init(&options);
  if (status != BSPA_OK) {
    *imp = NULL;
    return status;
  }
  options.salt = salt;
  options.salt_len = salt_len;
  options.extra_key = extra_key;
  options.peer_fingerprint = peer_fingerprint;
  options.peer_keys = peer_keys_in;
  options.num_peer_keys = num_peer_keys;
  return bspa_kv_import_create(imp, pool, tokens, n, &options);
}

bspa_status bspa_py_kv_export_pages(const bspa_kv_export *exp, int32_t *pages_out, void *keys_out,
                                    int64_t capacity, int64_t *num_pages) {
  return bspa_kv_export_pages(exp, pages_out, keys_out, capacity, num_pages);
}

bspa_status bspa_py_kv_import_pages(const bspa_kv_import *imp, int32_t *pages_out, int64_t *blocks_out,
                                    int64_t capacity, int64_t *num_pages) {
  return bspa_kv_import_pages(imp, pages_out, blocks_out, capacity, num_pages);
}

/* The header's ABI version, compiled into this module, for the load-time check. */
uint32_t bspa_py_header_abi_version(void) { return BSPA_ABI_VERSION; }
%}

/* ---- pool storage as a DLPack capsule (Pool.kv on CUDA, Pool.kv_tensors) ----------
 * The capsule's DLManagedTensor holds a reference to `owner` (the Python object that owns
 * the pool's storage) until the consumer calls its deleter, so a torch tensor made from it
 * keeps the storage alive after Pool.close(), as numpy views do (docs/design.md §7). */
%{
typedef struct {
  DLManagedTensor managed;
  int64_t shape[4];
  PyObject *owner;
} bspa_py_managed;

static void bspa_py_managed_deleter(DLManagedTensor *self) {
  bspa_py_managed *m = (bspa_py_managed *)self->manager_ctx;
  /* Consumers may free a tensor from any thread, with or without the GIL; after the
   * interpreter has finalized (a C++ static holding a tensor) the reference is leaked, as
   * NumPy's deleter does, since no Python call is possible then. */
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(m->owner);
    PyGILState_Release(gil);
  }
  free(m);
}

/* A capsule never consumed (still named "dltensor") frees its tensor itself; a consumer
 * renames it "used_dltensor" and owns the tensor from then on. */
static void bspa_py_capsule_destructor(PyObject *capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    DLManagedTensor *t = (DLManagedTensor *)PyCapsule_GetPointer(capsule, "dltensor");
    if (t && t->deleter) t->deleter(t);
  } else {
    PyErr_Clear();
  }
}
%}
/* Python objects are made here: the GIL must stay held (the module is built -threads). */
%nothread bspa_py_kv_capsule;
%inline %{
/* K (which = 0) or V (which = 1) of one layer as a "dltensor" capsule; on failure the
 * bspa_status as an int (bspa_last_error() says why). */
PyObject *bspa_py_kv_capsule(const bspa_pool *pool, int32_t layer, int32_t which, PyObject *owner) {
  DLTensor k, v;
  bspa_status status = bspa_pool_kv(pool, layer, &k, &v);
  if (status != BSPA_OK) return PyLong_FromLong(status);
  const DLTensor *t = which ? &v : &k;
  bspa_py_managed *m = (bspa_py_managed *)calloc(1, sizeof *m);
  if (!m) return PyErr_NoMemory();
  m->managed.dl_tensor = *t;
  for (int i = 0; i < t->ndim && i < 4; ++i) m->shape[i] = t->shape[i];
  m->managed.dl_tensor.shape = m->shape;
  m->managed.dl_tensor.strides = NULL; /* compact row-major */
  m->managed.manager_ctx = m;
  m->managed.deleter = bspa_py_managed_deleter;
  Py_INCREF(owner);
  m->owner = owner;
  PyObject *capsule = PyCapsule_New(&m->managed, "dltensor", bspa_py_capsule_destructor);
  if (!capsule) bspa_py_managed_deleter(&m->managed);
  return capsule;
}
%}
