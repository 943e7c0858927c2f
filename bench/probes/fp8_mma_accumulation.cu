// How does an FP8 tensor-core instruction accumulate? A hardware probe for issue 20's next
// step (bench/NOTES.md, "FP8 KV (CUDA)", "Session 17"): e4m3 operands keep the accuracy
// contract only with q and P split into hi + lo e4m3 operands and with the accumulation
// kept to fp32 across key steps (bench/fp8_operand_accuracy.py), and how many bits an
// instruction keeps decides whether a step's partial sum needs registers of its own.
//
// Each probe is one instruction with B all ones, so D[0][0] = C[0][0] + the sum of row 0 of
// A, whatever B's layout: up to four A values in row 0 (lane 0's first register: k 0..3
// for 8-bit A, k 0..1 and 8..9 for 16-bit), C[0][0] = c. The printed result is D - c
// against the exact sum, for instructions:
//   mma.e4m3  mma.sync m16n8k32 e4m3 x e4m3 -> f32      (one warp)
//   mma.f16   mma.sync m16n8k16 f16 x f16 -> f32        (the control: what decode uses)
//   wgmma.e4m3 wgmma m64n8k32 e4m3, A from registers    (one warpgroup)
//   wgmma.f16 wgmma m64n8k16 f16, A from registers      (the control: what prefill uses)
// The cases: c = 2^j plus 1 and minus 1 (how many bits of the accumulator survive, and
// whether dropped bits are truncated toward zero or rounded), and c = 0 with products
// 2^8 and 2^-j in one instruction (whether products are aligned to the largest before
// they are summed).
//
// Build (sm_90a, from the repository root), run on the GPU machine:
//   nvcc -O2 -std=c++17 -arch=sm_90a -I. -o probe_fp8_mma bench/probes/fp8_mma_accumulation.cu
//   ./probe_fp8_mma
// Not part of the library or of CI: a question asked of the hardware once, kept so that the
// answer can be checked on a new GPU.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "bench/probes/e4m3_probe_common.cuh"

namespace {

enum Kind { kMmaE4m3, kMmaF16, kWgmmaE4m3, kWgmmaF16 };
const char *const kKindNames[] = {"mma.e4m3", "mma.f16", "wgmma.e4m3", "wgmma.f16"};

struct Case {
  float c;
  float a[4];
};

// e4m3 code of a value the format holds exactly (the cases use only such values).
uint8_t e4m3_code(float v) {
  for (int code = 0; code < 0x7F; ++code) {
    const int e = code >> 3, m = code & 7;
    const float x = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1 + m / 8.0f, e - 7);
    if (x == std::fabs(v)) return static_cast<uint8_t>(code | (v < 0 ? 0x80 : 0));
  }
  std::fprintf(stderr, "%g is not an e4m3 value\n", v);
  std::exit(1);
}

uint16_t f16_bits(float v) {
  const __half h = __float2half_rn(v);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// Lane 0's A registers: 8-bit A holds k 0..3 of row 0 in its first register; 16-bit A
// holds k 0, 1 in its first and k 8, 9 in its third (both layouts as in the PTX ISA's
// fragments for m16n8k32 / m16n8k16, which wgmma's A from registers shares per warp).
struct Operands {
  uint32_t a0, a2;
  float c;
};

Operands operands(Kind kind, const Case &t) {
  Operands o{0, 0, t.c};
  if (kind == kMmaE4m3 || kind == kWgmmaE4m3) {
    for (int i = 0; i < 4; ++i) o.a0 |= uint32_t{e4m3_code(t.a[i])} << (8 * i);
  } else {
    o.a0 = f16_bits(t.a[0]) | uint32_t{f16_bits(t.a[1])} << 16;
    o.a2 = f16_bits(t.a[2]) | uint32_t{f16_bits(t.a[3])} << 16;
  }
  return o;
}

__global__ void probe(Kind kind, const Operands *in, float *out, int n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // B: all ones, 1 KiB-aligned, as many bytes as any layout of B here can reach.
  __shared__ __align__(1024) uint8_t sB[2048];
  const bool e4m3 = kind == kMmaE4m3 || kind == kWgmmaE4m3;
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) sB[i] = e4m3 ? 0x38 : (i & 1 ? 0x3C : 0x00);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sB));
  // No swizzle; LBO 128 and SBO 256 bytes: any reading of the 2 KiB reads ones.
  const uint64_t b_desc = ((b_addr & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{256 >> 4} << 32);
  const uint32_t ones_b = e4m3 ? 0x38383838u : 0x3C003C00u;
  for (int t = 0; t < n; ++t) {
    const bool lane0 = threadIdx.x == 0;
    uint32_t a[4] = {lane0 ? in[t].a0 : 0u, 0u, lane0 ? in[t].a2 : 0u, 0u};
    float d[4] = {lane0 ? in[t].c : 0.f, 0.f, 0.f, 0.f};
    if (kind == kMmaE4m3 || kind == kMmaF16) {
      if (threadIdx.x < 32) {
        if (kind == kMmaE4m3)
          asm volatile(
              "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(ones_b), "r"(ones_b));
        else
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(ones_b), "r"(ones_b));
      }
    } else {
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      if (kind == kWgmmaE4m3)
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
      else
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
    }
    // D[0][0] and D[0][1] (lane 0's first two accumulators): equal when B is all ones.
    if (threadIdx.x == 0) out[2 * t] = d[0], out[2 * t + 1] = d[1];
  }
#else
  if (threadIdx.x == 0) __trap();
#endif
}

}  // namespace

int main() {
  // c = 2^j with +1, -1 and +1.5 (ties and truncation), then c = 0 with 2^8 + 2^-j in one
  // instruction (alignment of products before their sum).
  Case cases[64];
  char labels[64][48];
  int n = 0;
  for (int j = 10; j <= 25; j += (j < 18 || j >= 23) ? 1 : 5) {
    for (float a : {1.0f, -1.0f, 1.5f}) {
      cases[n] = {std::ldexp(1.0f, j), {a, 0, 0, 0}};
      std::snprintf(labels[n++], 48, "c = 2^%d, a = %+g", j, a);
    }
  }
  for (int j = 0; j <= 9; j += 1) {
    cases[n] = {0.0f, {256.0f, std::ldexp(1.0f, -j), 0, 0}};
    std::snprintf(labels[n++], 48, "c = 0, a = 2^8 + 2^-%d", j);
  }
  int dev = 0;
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s (sm_%d%d); D[0][0] - c against the exact sum (B all ones)\n", prop.name, prop.major, prop.minor);
  std::printf("%-28s %12s", "case", "exact");
  for (const char *k : kKindNames) std::printf(" %12s", k);
  std::printf("\n");
  Operands *d_in;
  float *d_out;
  CUDA_OK(cudaMalloc(&d_in, sizeof(Operands) * n));
  CUDA_OK(cudaMalloc(&d_out, sizeof(float) * 2 * n));
  float results[4][128];
  for (int k = 0; k < 4; ++k) {
    Operands host[64];
    for (int t = 0; t < n; ++t) host[t] = operands(static_cast<Kind>(k), cases[t]);
    CUDA_OK(cudaMemcpy(d_in, host, sizeof(Operands) * n, cudaMemcpyHostToDevice));
    probe<<<1, 128>>>(static_cast<Kind>(k), d_in, d_out, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(results[k], d_out, sizeof(float) * 2 * n, cudaMemcpyDeviceToHost));
  }
  int layout_errors = 0;
  for (int t = 0; t < n; ++t) {
    const double exact = static_cast<double>(cases[t].a[0]) + cases[t].a[1] + cases[t].a[2] + cases[t].a[3];
    std::printf("%-28s %12.9g", labels[t], exact);
    for (int k = 0; k < 4; ++k) {
      std::printf(" %12.9g", static_cast<double>(results[k][2 * t]) - cases[t].c);
      layout_errors += results[k][2 * t] != results[k][2 * t + 1];
    }
    std::printf("\n");
  }
  std::printf("D[0][0] != D[0][1] (a layout assumption wrong): %d\n", layout_errors);
  return layout_errors ? 2 : 0;
}
