// Does a GPU run mma.sync's e4m3 form on its tensor cores, or does ptxas emulate it? A
// compile-only probe for issue 20 (bench/NOTES.md, "FP8 KV (CUDA)", "Session 24"): the
// session-17 design took mma.sync m16n8k32 e4m3 for the decode kernel's "cheaper first
// target", which pays only where the instruction is native; sessions 19 and 24 each built
// it into the decode kernel before reading the SASS.
//
// Build for each architecture and read the SASS (no GPU needed):
//   for a in sm_89 sm_90a sm_100a sm_120a; do
//     nvcc -cubin -arch=$a -o mma_e4m3_$a.cubin bench/probes/mma_sync_e4m3_lowering.cu
//     cuobjdump -sass mma_e4m3_$a.cubin | grep -E "MMA|F2FP"; done
// nvcc 13.0's answer: sm_89 and sm_120a issue one QMMA.16832.F32.E4M3.E4M3; sm_90a and
// sm_100a unpack all six operand registers (F2FP.F16.E4M3.UNPACK_B, twelve of them) and issue
// two HMMA.16816.F32 (f16): on Hopper e4m3 tensor-core math exists only as wgmma. Not part
// of the library or of CI.
#include <cstdint>

__global__ void mma_e4m3(float *d, const uint32_t *a, const uint32_t *b) {
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const int t = threadIdx.x;
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[t]), "r"(a[t + 32]), "r"(a[t + 64]), "r"(a[t + 96]), "r"(b[t]), "r"(b[t + 32]));
  for (int i = 0; i < 4; ++i) d[4 * t + i] = c[i];
}
