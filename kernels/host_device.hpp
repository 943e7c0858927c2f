// BSPA_HOST_DEVICE: __host__ __device__ where nvcc compiles, nothing for the host compiler,
// for the few headers whose code the CPU backend and the CUDA kernels share (block_rule.hpp,
// fp8_e4m3.hpp, tile_alignment.hpp).
#pragma once

#ifdef __CUDACC__
#define BSPA_HOST_DEVICE __host__ __device__
#else
#define BSPA_HOST_DEVICE
#endif
