// CUDA_OK(call): a CUDA runtime call that must succeed, or the program prints where and why
// and exits with status 2. The bench and check programs (gpu_common.hpp) and the hardware
// probes (bench/probes/) share it.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_OK(call)                                                                             \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)
