/* The CUDA driver API loaded at run time (libcuda.so.1) for the GPU Criterion tests, so they
 * need no CUDA toolkit to build: need_gpu() skips the test without a GPU and makes the
 * primary context current (the one the runtime inside bspa uses); to_device, from_device,
 * dfree and cu.memset8 move device memory. One copy for every test_gpu_*.c (included, not
 * linked: only those tests want libcuda). */
#pragma once

#include <dlfcn.h>
#include <stdint.h>

#include "support.h"

typedef int (*cu_init_t)(unsigned);
typedef int (*cu_dev_get_t)(int *, int);
typedef int (*cu_retain_t)(void **, int);
typedef int (*cu_set_t)(void *);
typedef int (*cu_alloc_t)(unsigned long long *, size_t);
typedef int (*cu_free_t)(unsigned long long);
typedef int (*cu_htod_t)(unsigned long long, const void *, size_t);
typedef int (*cu_dtoh_t)(void *, unsigned long long, size_t);
typedef int (*cu_memset_t)(unsigned long long, unsigned char, size_t);
typedef int (*cu_sync_t)(void);
typedef int (*cu_attr_t)(int *, int, int);

static struct {
  cu_alloc_t alloc;
  cu_free_t free;
  cu_htod_t htod;
  cu_dtoh_t dtoh;
  cu_memset_t memset8;
  cu_sync_t sync;
  int compute_capability; /* of device 0: 10 * major + minor, e.g. 90 */
} cu;

/* Skips the test unless bspa sees a GPU and the driver API is loadable. */
static inline void need_gpu(void) {
  int32_t n = 0;
  EXPECT_OK(bspa_device_count(kDLCUDA, &n));
  if (n == 0) cr_skip_test("no CUDA device");
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) cr_skip_test("libcuda.so.1 not loadable");
  cu_init_t init = (cu_init_t)dlsym(lib, "cuInit");
  cu_dev_get_t dev_get = (cu_dev_get_t)dlsym(lib, "cuDeviceGet");
  cu_retain_t retain = (cu_retain_t)dlsym(lib, "cuDevicePrimaryCtxRetain");
  cu_set_t set = (cu_set_t)dlsym(lib, "cuCtxSetCurrent");
  cu.alloc = (cu_alloc_t)dlsym(lib, "cuMemAlloc_v2");
  cu.free = (cu_free_t)dlsym(lib, "cuMemFree_v2");
  cu.htod = (cu_htod_t)dlsym(lib, "cuMemcpyHtoD_v2");
  cu.dtoh = (cu_dtoh_t)dlsym(lib, "cuMemcpyDtoH_v2");
  cu.memset8 = (cu_memset_t)dlsym(lib, "cuMemsetD8_v2");
  cu.sync = (cu_sync_t)dlsym(lib, "cuCtxSynchronize");
  cu_attr_t attr = (cu_attr_t)dlsym(lib, "cuDeviceGetAttribute");
  cr_assert(init && dev_get && retain && set && cu.alloc && cu.free && cu.htod && cu.dtoh && cu.memset8 && cu.sync &&
            attr);
  int dev = 0;
  void *ctx = NULL;
  cr_assert_eq(init(0), 0);
  cr_assert_eq(dev_get(&dev, 0), 0);
  cr_assert_eq(retain(&ctx, dev), 0); /* the runtime inside bspa uses the primary context too */
  cr_assert_eq(set(ctx), 0);
  int major = 0, minor = 0; /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR */
  cr_assert_eq(attr(&major, 75, dev), 0);
  cr_assert_eq(attr(&minor, 76, dev), 0);
  cu.compute_capability = 10 * major + minor;
}

static inline void *to_device(const void *host, size_t bytes) {
  unsigned long long p = 0;
  cr_assert_eq(cu.alloc(&p, bytes ? bytes : 16), 0);
  if (bytes && host) cr_assert_eq(cu.htod(p, host, bytes), 0);
  return (void *)(uintptr_t)p;
}
static inline void from_device(void *host, const void *dev, size_t bytes) {
  cr_assert_eq(cu.sync(), 0);
  cr_assert_eq(cu.dtoh(host, (unsigned long long)(uintptr_t)dev, bytes), 0);
}
static inline void dfree(void *p) { cu.free((unsigned long long)(uintptr_t)p); }
