// Session 26's probe (bench/NOTES.md, "Session 26", item 2): each form of a cache-hinted
// cp.async alone in a kernel, to tell a fault of the PTX from one of ptxas in the decode
// kernel. MODE 0: no src-size, constant policy; 1: src-size 16; 2: src-size 16 or 0 (zero
// fill), constant policy; 3: the same with createpolicy's policy; 4: the plain form.
// Built with `nvcc -O2 -arch=sm_90a`; on the H200 every mode ran and copied correctly.
#include <cstdint>
#include <cstdio>
constexpr uint64_t kPol = 0x12F0000000000000ull;
template <int MODE>
__global__ void k(const int4 *src, int n, int *out) {
  __shared__ int4 s[256];
  const uint32_t dst = (uint32_t)__cvta_generic_to_shared(&s[threadIdx.x]);
  const int4 *p = src + threadIdx.x;
  if (MODE == 0)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(p), "l"(kPol)
                 : "memory");
  if (MODE == 1)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(p), "r"(16),
                 "l"(kPol)
                 : "memory");
  if (MODE == 2)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(p),
                 "r"((int)threadIdx.x < n ? 16 : 0), "l"(kPol)
                 : "memory");
  if (MODE == 3) {
    uint64_t q;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(q));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(p),
                 "r"((int)threadIdx.x < n ? 16 : 0), "l"(q)
                 : "memory");
  }
  if (MODE == 4)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(p),
                 "r"((int)threadIdx.x < n ? 16 : 0)
                 : "memory");
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x].y;
}
template <int MODE>
void run(int4 *src, int *out) {
  k<MODE><<<1, 256>>>(src, 200, out);
  cudaError_t e = cudaDeviceSynchronize();
  int h[256];
  cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
  printf("mode %d: %s out[5]=%d out[250]=%d\n", MODE, cudaGetErrorString(e), h[5], h[250]);
}
int main() {
  int4 *src;
  int *out;
  cudaMalloc(&src, 256 * 16);
  cudaMalloc(&out, 1024);
  int4 hs[256];
  for (int i = 0; i < 256; ++i) hs[i] = make_int4(i, i + 1, i, i);
  cudaMemcpy(src, hs, sizeof hs, cudaMemcpyHostToDevice);
  const char *m = getenv("MODE");
  int mode = m ? atoi(m) : 0;
  if (mode == 0) run<0>(src, out);
  if (mode == 1) run<1>(src, out);
  if (mode == 2) run<2>(src, out);
  if (mode == 3) run<3>(src, out);
  if (mode == 4) run<4>(src, out);
}
