// How many thread-block clusters of 1..16 CTAs a device holds at once
// (cudaOccupancyMaxActiveClusters) for CTAs the size of the decode kernel's two-quad ones
// (256 threads; e4m3 ~137 KB and bf16 ~201 KB of shared memory at head dim 128: one an
// SM), and the SMs of each GPC as the clusters see them. Session 29: batch-1 decode
// merges its 16 splits inside a cluster only where 8 clusters of 16 fit at once.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o probe_cluster_occupancy bench/probes/cluster_occupancy.cu
#include <cuda_runtime.h>

#include <cstdio>

__global__ void one_cta_an_sm() {
  extern __shared__ char smem[];
  smem[threadIdx.x] = 0;
}

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaFuncSetAttribute(one_cta_an_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int smem_kb : {137, 201}) {
    cudaFuncSetAttribute(one_cta_an_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_kb * 1024);
    std::printf("shared %d KB:", smem_kb);
    for (int size = 1; size <= 16; ++size) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(size);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = static_cast<size_t>(smem_kb) * 1024;
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = size;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = -1;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, one_cta_an_sm, &cfg);
      std::printf(" %d:%d", size, e == cudaSuccess ? clusters : -1);
    }
    std::printf("\n");
  }
  return 0;
}
