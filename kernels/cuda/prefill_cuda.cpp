// prefill_cuda: checks what the kernels support (anything else is NotSupported, never a
// wrong answer), maps the problem to kernel parameters, routes the rows of short queries to
// the decode kernel and the rest to a prefill kernel family (sm90a wgmma on compute
// capability 9.0, sm80 mma.sync elsewhere) with its tile.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/decode.hpp"
#include "kernels/cuda/env_switch.hpp"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/cuda/prefill_sm90.hpp"
#include "kernels/decode_routing.hpp"
#include "kernels/mixed_step_share.hpp"

namespace bspa::kernels {
namespace {

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
bool stride_ok(int64_t s) { return s % 8 == 0; }  // 16 bytes of 2-byte elements

int log2_exact(int32_t v) {
  int s = 0;
  while ((int64_t{1} << s) < v) ++s;
  return (int64_t{1} << s) == v ? s : -1;
}

template <class T, class KV>
void dispatch(const sm80::Params &prm, int head_dim, int bm, dim3 grid, cudaStream_t stream) {
  if (head_dim == 64) {
    if (bm == 128)
      sm80::launch<T, KV, 64, 128>(prm, grid, stream);
    else
      sm80::launch<T, KV, 64, 64>(prm, grid, stream);
  } else {
    if (bm == 128)
      sm80::launch<T, KV, 128, 128>(prm, grid, stream);
    else
      sm80::launch<T, KV, 128, 64>(prm, grid, stream);
  }
}

// A type as a value, for the generic lambdas of with_element_types.
template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>, TypeTag<KV>) with the element types of a launch: T of q/out (bf16 or
// f16), KV of the pages (T, or uint8_t for e4m3). One place maps runtime dtypes to the
// kernels' template arguments, for every kernel family.
template <class F>
void with_element_types(DType dtype, bool e4m3, F &&f) {
  auto pages = [&](auto t) {
    if (e4m3)
      f(t, TypeTag<uint8_t>{});
    else
      f(t, t);
  };
  if (dtype == DType::BF16)
    pages(TypeTag<__nv_bfloat16>{});
  else
    pages(TypeTag<__half>{});
}

template <class T, class KV>
void dispatch_sm90(const sm80::Params &prm, int head_dim, dim3 grid, const sm90::WalkBounds &walk,
                   const SplitWorkspace &split, cudaStream_t stream) {
  if (head_dim == 64)
    sm90::launch<T, KV, 64>(prm, grid, walk, split, stream);
  else
    sm90::launch<T, KV, 128>(prm, grid, walk, split, stream);
}

// BSPA_CUDA_PATH=sm80|sm90 forces a kernel family (to time or test both on one GPU);
// unset or "auto": sm90 on compute capability 9.0 when this build carries sm_90a code, for
// query tiles of 128 rows (shorter queries keep sm80's 64-row tiles); it is faster than sm80
// on every bench/ case there (bench/NOTES.md, "CUDA prefill (sm90a path)").
enum class Path { Auto, Sm80, Sm90 };

Path parse_path() {
  const char *e = std::getenv("BSPA_CUDA_PATH");
  if (e == nullptr || *e == '\0' || std::strcmp(e, "auto") == 0) return Path::Auto;
  if (std::strcmp(e, "sm80") == 0) return Path::Sm80;
  if (std::strcmp(e, "sm90") == 0) return Path::Sm90;
  fail(Errc::NotSupported, "BSPA_CUDA_PATH = \"", e, "\": expected sm80, sm90 or auto");
}

// Read once per process (a getenv per launch is host time a launch should not spend); an
// unknown value is reported by every launch.
Path requested_path() {
  static const struct Cached {
    Path path = Path::Auto;
    bool bad = false;
    std::string value;
  } cached = [] {
    Cached c;
    try {
      c.path = parse_path();
    } catch (const Error &) {
      c.bad = true;
      c.value = std::getenv("BSPA_CUDA_PATH");
    }
    return c;
  }();
  if (cached.bad) fail(Errc::NotSupported, "BSPA_CUDA_PATH = \"", cached.value, "\": expected sm80, sm90 or auto");
  return cached.path;
}

// BSPA_DECODE_SPLITS=N (a diagnostic), read once per process: 0 when unset or out of range.
int32_t forced_decode_splits() {
  static const int32_t n = cuda::env_int("BSPA_DECODE_SPLITS", 1, 1024, 0);
  return n;
}

// BSPA_CUDA_OVERLAP=0 (a diagnostic, read once) launches a mixed call's decode grid after
// its prefill grid has completed instead of overlapping the prefill's last CTAs: to time
// the overlap against the serial launch in one process.
bool mixed_overlap_enabled() {
  static const bool on = cuda::env_flag("BSPA_CUDA_OVERLAP", true);
  return on;
}

// BSPA_CUDA_MIXED_PREFILL_CTAS=N (a diagnostic, read once): at most N CTAs (0: one an SM)
// for the sm90a prefill grid of a mixed launch whose decode grid overlaps it, instead of the
// share mixed_prefill_ctas gives it (kernels/mixed_step_share.hpp), to time how a mixed
// step's SMs are best shared. -1: unset.
int32_t forced_mixed_prefill_ctas() {
  static const int32_t value = cuda::env_int("BSPA_CUDA_MIXED_PREFILL_CTAS", 0, 1 << 16, -1);
  return value;
}

// The sm90a prefill grid's CTAs at most for a mixed launch on `device` (0: one an SM): the
// share kernels/mixed_step_share.hpp gives the launch's mixed_work (a pool batch's dense
// step over 16-bit pages; none elsewhere), unless the environment forces one.
int32_t mixed_prefill_cap(const PrefillProblem &p, int device) {
  if (const int32_t forced = forced_mixed_prefill_ctas(); forced >= 0) return forced;
  if (!p.mixed_work.mixed()) return 0;  // no device attributes to read
  const int32_t sms = cuda::multiprocessor_count(device);
  return mixed_prefill_ctas(sms, p.mixed_work,
                            device_rates(sms, cuda::sm_clock_hz(device), cuda::memory_peak_bytes_per_s(device)),
                            p.num_q_heads, p.num_kv_heads, p.head_dim);
}

// BSPA_CUDA_DECODE_QUADS=1|2 (a diagnostic, read once): at most that many quads of warps a
// decode CTA (default 3, the most a variant has), to time the variants against each other
// in one process.
int32_t decode_max_quads() {
  static const int32_t quads = cuda::env_int("BSPA_CUDA_DECODE_QUADS", 1, 3, 3);
  return quads;
}

// BSPA_CUDA_DECODE_CLUSTER=0 (a diagnostic, read once) keeps every split decode launch on
// the merge through global memory (decode::Split::cluster off): to time the cluster merge
// against it, and to check the two give the same bytes.
bool decode_cluster_enabled() {
  static const bool on = cuda::env_flag("BSPA_CUDA_DECODE_CLUSTER", true);
  return on;
}

bool built_with_sm90a() { return std::strstr(BSPA_CUDA_ARCHS_STRING, "90a") != nullptr; }

// Compute capability 9.0 (sm_90a code runs on nothing else), cached per device.
bool device_is_sm90(int device) {
  constexpr int kCache = 64;
  static std::atomic<int> cache[kCache];  // 0 unknown, 1 no, 2 yes
  if (device >= 0 && device < kCache) {
    const int c = cache[device].load(std::memory_order_relaxed);
    if (c != 0) return c == 2;
  }
  int major = 0, minor = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                   "cudaDeviceGetAttribute(major)");
  cuda::check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                   "cudaDeviceGetAttribute(minor)");
  const bool yes = major == 9 && minor == 0;
  if (device >= 0 && device < kCache) cache[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

// Returns whether it launched a grid (none for an empty work list or no query tiles).
// check_only: every check, no launch (a fixed-shape batch's eager step without prefill
// work fails where its captured graph would). max_ctas: the sm90a grid's CTAs at most (0:
// one an SM).
bool launch_prefill(const PrefillProblem &p, sm80::Params &prm, cudaStream_t stream, int device, bool check_only,
                    int32_t max_ctas) {
  if (p.work && p.num_work <= 0) return false;
  const bool e4m3 = p.kv.kv_dtype == DType::FP8_E4M3;

  // 128-row query tiles halve the K/V traffic per row; short queries (decode, small
  // chunks) would mostly fill them with padding, so they get 64-row tiles (sm80 only).
  const Path path = requested_path();
  const bool sm90_ok = built_with_sm90a() && device_is_sm90(device);
  check(path != Path::Sm90 || sm90_ok, Errc::NotSupported,
        "BSPA_CUDA_PATH = sm90 needs a compute capability 9.0 device and a build with sm_90a (BSPA_CUDA_ARCHS = ",
        BSPA_CUDA_ARCHS_STRING, ")");
  // e4m3 pages take the same route: both families widen them to 16-bit operands. A
  // fixed-shape batch's work list (live_work_entries) takes the persistent sm90a kernel
  // whatever its rows: its grid is one CTA an SM and walks only the step's own entries, where
  // sm80's is a CTA per padded tile (a decode step of 64 sequences: 8192 CTAs that only
  // exit, ~20 us a layer in a captured graph; bench/NOTES.md, "Engine step").
  const bool use_sm90 = path == Path::Sm90 ||
                        (path == Path::Auto && sm90_ok && (p.max_query_len > 64 || (p.work && p.live_work_entries)));
  const int bm = use_sm90 || p.max_query_len > 64 ? 128 : 64;
  dim3 grid;
  if (p.work && p.work_tile_rows % bm == 0) {
    prm.work = p.work;
    prm.work_tile_rows = p.work_tile_rows;
    const int64_t y = static_cast<int64_t>(p.num_work) * (p.work_tile_rows / bm);
    check(y <= cuda::kMaxGridYZ, Errc::NotSupported, "the CUDA prefill launches at most ", cuda::kMaxGridYZ,
          " query tiles per head (", y, " needed)");
    grid = dim3(p.num_q_heads, static_cast<unsigned>(y), 1);
  } else {
    const int64_t tiles = (static_cast<int64_t>(p.max_query_len) + bm - 1) / bm;
    if (tiles == 0) return false;
    check(tiles <= cuda::kMaxGridYZ && p.num_seqs <= cuda::kMaxGridYZ, Errc::NotSupported,
          "the CUDA prefill launches at most ", cuda::kMaxGridYZ, " query tiles per sequence and ", cuda::kMaxGridYZ,
          " sequences");
    grid = dim3(p.num_q_heads, static_cast<unsigned>(tiles), p.num_seqs);
  }
  if (check_only) return false;
  with_element_types(p.dtype, e4m3, [&](auto t, auto kv) {
    using T = typename decltype(t)::type;
    using KV = typename decltype(kv)::type;
    if (use_sm90)
      dispatch_sm90<T, KV>(prm, p.head_dim, grid, sm90::WalkBounds{p.total_q, p.live_work_entries, max_ctas}, p.split,
                           stream);
    else
      dispatch<T, KV>(prm, p.head_dim, bm, grid, stream);
  });
  return true;
}

template <class T, class KV>
void dispatch_decode(const sm80::Params &prm, int head_dim, int32_t num_seqs, int32_t num_kv_heads, int32_t max_rows,
                     const decode::Split &split, const decode::Overlap &overlap, cudaStream_t stream) {
  if (head_dim == 64)
    decode::launch<T, KV, 64>(prm, num_seqs, num_kv_heads, max_rows, split, overlap, stream);
  else
    decode::launch<T, KV, 128>(prm, num_seqs, num_kv_heads, max_rows, split, overlap, stream);
}

// The sm90a prefill's share of the split workspace on `device` (0 where it does not run).
size_t prefill_split_bytes(int32_t device, int32_t head_dim) {
  if (!built_with_sm90a() || !device_is_sm90(device)) return 0;
  return cuda::align_to_256(sm90::split_workspace_bytes(head_dim, cuda::multiprocessor_count(device)));
}

}  // namespace

int32_t cuda_decode_max_query_len() {
  // 0 (no decode kernel) or 1..kCudaDecodeMaxQueryLen (the longest query it takes).
  static const int32_t value = cuda::env_int("BSPA_CUDA_DECODE", 0, kCudaDecodeMaxQueryLen, kCudaDecodeMaxQueryLen);
  return value;
}

size_t prefill_workspace_bytes_cuda(int32_t device, int32_t head_dim) {
  if (head_dim != 64 && head_dim != 128) return 0;
  // The prefill's part first, then the decode kernel's: a mixed launch runs both grids at
  // once on compute capability 9.0 (decode::Overlap::previous), each in its own part.
  return prefill_split_bytes(device, head_dim) + decode::workspace_bytes(head_dim, cuda::multiprocessor_count(device));
}

SplitWorkspace allocate_split_workspace_cuda(int32_t device, int32_t head_dim, int64_t counter_items, void *stream) {
  const size_t bytes = prefill_workspace_bytes_cuda(device, head_dim);
  if (bytes == 0) return {};
  // [the prefill's part][the counters][the decode units]: prefill_cuda finds the decode
  // part at the same place for every launch, so the prefill grid never writes its counters.
  const int64_t items = std::max<int64_t>(counter_items, 1);
  const size_t counters = decode::counter_bytes(items);
  SplitWorkspace w;
  w.bytes = bytes + counters;
  w.data = cuda_malloc(device, w.bytes);
  w.kept_clear_counters = items;
  DeviceGuard guard(device);
  const cudaError_t e = cudaMemsetAsync(static_cast<char *>(w.data) + prefill_split_bytes(device, head_dim), 0,
                                        counters, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) {
    cuda_free(device, w.data);
    cuda::check_cuda(e, "zeroing the split workspace's decode counters");
  }
  return w;
}

void prefill_cuda(const PrefillProblem &p, void *stream_ptr) {
  check(p.dtype == DType::BF16 || p.dtype == DType::F16, Errc::NotSupported, "dtype = ", dtype_name(p.dtype),
        ": the CUDA prefill supports bf16 and f16");
  check(p.head_dim == 64 || p.head_dim == 128, Errc::NotSupported, "head_dim = ", p.head_dim,
        ": the CUDA prefill supports 64 and 128");
  check(p.layout != nullptr, Errc::NullPointer, "layout is NULL");
  const Layout &layout = *p.layout;
  check(p.num_kv_heads >= 1 && p.num_q_heads % p.num_kv_heads == 0, Errc::InvalidArgument,
        "num_q_heads = ", p.num_q_heads, " is not a multiple of num_kv_heads = ", p.num_kv_heads);
  const int page_shift = log2_exact(p.page_size);
  check(page_shift >= 0, Errc::NotSupported, "page_size = ", p.page_size,
        ": the CUDA prefill supports power-of-two page sizes");
  check(layout.kind == Layout::Kind::Dense || (layout.block_size >= 64 && layout.block_size % 64 == 0),
        Errc::NotSupported, "layout block_size = ", layout.block_size,
        ": the CUDA prefill supports block sizes that are multiples of 64");
  check(aligned16(p.q) && aligned16(p.out) && aligned16(p.kv.k) && aligned16(p.kv.v), Errc::NotSupported,
        "the CUDA prefill needs 16-byte aligned q, out, k and v data");
  const bool e4m3 = p.kv.kv_dtype == DType::FP8_E4M3;
  // 16-byte copies: strides of 8 two-byte elements, or of 16 e4m3 ones for fp8 pages.
  const int64_t kv_elems16 = e4m3 ? 16 : 8;
  auto kv_stride_ok = [&](int64_t s) { return s % kv_elems16 == 0; };
  check(stride_ok(p.q_token_stride) && stride_ok(p.q_head_stride) && stride_ok(p.out_token_stride) &&
            stride_ok(p.out_head_stride) && kv_stride_ok(p.kv.k_page_stride) && kv_stride_ok(p.kv.k_head_stride) &&
            kv_stride_ok(p.kv.k_token_stride) && kv_stride_ok(p.kv.v_page_stride) && kv_stride_ok(p.kv.v_head_stride) &&
            kv_stride_ok(p.kv.v_token_stride),
        Errc::NotSupported, "the CUDA prefill needs strides that are multiples of 16 bytes");
  check(!e4m3 || (p.kv.k_scale != nullptr && p.kv.v_scale != nullptr), Errc::NullPointer,
        "fp8_e4m3 pages need their K and V scales (k_scale = ", static_cast<const void *>(p.kv.k_scale),
        ", v_scale = ", static_cast<const void *>(p.kv.v_scale), ")");
  check(std::isfinite(p.scale), Errc::InvalidArgument, "scale = ", p.scale, " is not finite");
  check(p.scale > 0.0f, Errc::NotSupported, "scale = ", p.scale,
        ": the CUDA prefill supports positive scales (it folds the scale into exp2 after the row max)");
  if (p.num_seqs <= 0 || p.total_q <= 0 || p.num_q_heads <= 0) return;

  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  cuda::PointerDeviceGuard device(p.q, p.device);

  sm80::Params prm{};
  prm.q = p.q;
  prm.q_tok = p.q_token_stride;
  prm.q_head = p.q_head_stride;
  prm.out = p.out;
  prm.o_tok = p.out_token_stride;
  prm.o_head = p.out_head_stride;
  prm.lse = p.lse;
  prm.lse_head = p.lse_head_stride;
  prm.k = p.kv.k;
  prm.v = p.kv.v;
  prm.k_page = p.kv.k_page_stride;
  prm.k_head = p.kv.k_head_stride;
  prm.k_tok = p.kv.k_token_stride;
  prm.v_page = p.kv.v_page_stride;
  prm.v_head = p.kv.v_head_stride;
  prm.v_tok = p.kv.v_token_stride;
  prm.k_scale = e4m3 ? p.kv.k_scale : nullptr;
  prm.v_scale = e4m3 ? p.kv.v_scale : nullptr;
  prm.num_pages = p.kv.num_pages;
  prm.query_starts = p.query_starts;
  prm.context_lens = p.context_lens;
  prm.block_table = p.block_table;
  prm.bt_stride = p.block_table_stride;
  prm.group = p.num_q_heads / p.num_kv_heads;
  prm.page_shift = page_shift;
  prm.scale_log2 = p.scale * 1.4426950408889634f;
  prm.layout = cuda::device_layout(layout, device.device(), stream);
  if (layout.kind == Layout::Kind::Dense) prm.layout.block_size = 64;

  // Routing (kernels/decode_routing.hpp): sequences with 1..route.bound new tokens go to the
  // decode kernel, the others to a prefill kernel, both launched here on the stream (the
  // decode kernel after the prefill kernel, overlapping its last CTAs on compute capability
  // 9.0; below). The bound is the process's (BSPA_CUDA_DECODE) lowered by the caller's
  // (max_decode_query_len) and where the decode kernel cannot take the rows: q x group must
  // fit its 64-row tile (GQA groups over 8, MQA) and its shared memory the device (GPUs
  // with under 120 KB a block: sm86/sm89). Which sequences are short is known on the host
  // for pool batches (decode_seqs); over device metadata both kernels run when there are
  // several sequences, each skipping the other's. Every check comes before the first
  // launch (a failed call writes nothing).
  const size_t max_shared = static_cast<size_t>(cuda::max_shared_bytes_per_block(device.device()));
  DecodeRouteInput route_in;
  route_in.process_bound = cuda_decode_max_query_len();
  route_in.caller_bound = p.decode_query_bound;
  route_in.group = prm.group;
  route_in.max_tile_rows = decode::kMaxRows;
  route_in.num_seqs = p.num_seqs;
  route_in.num_kv_heads = p.num_kv_heads;
  route_in.max_query_len = p.max_query_len;
  route_in.decode_seqs = p.decode_seqs;
  const DecodeRoute route = route_decode_rows(
      route_in, [&](int32_t rows) { return decode::shared_bytes(p.head_dim, rows, e4m3) <= max_shared; });
  const bool route_decode = route.decode, any_prefill = route.prefill;
  prm.decode_max_query_len = route.bound;
  // A pool batch's work list leaves out the sequences of up to its plan's bound
  // (decode_query_bound): where this launch routes fewer of them to the decode kernel, the
  // prefill covers every sequence through the grid instead (skipping only the ones decode
  // computes).
  PrefillProblem prefill = p;
  if (prefill.work && prm.decode_max_query_len != p.decode_query_bound) prefill.work = nullptr;
  // A fixed-shape batch's grid with none of this step's work (idle_grids, in
  // decode_routing.hpp) is not launched outside stream capture: its CTAs would only exit,
  // and an eager decode step of such a batch would pay two launches. Everything else below
  // (the workspace's parts, the decode split) is planned as if both ran, so an eager launch
  // computes the same bits as a graph captured with both grids.
  const IdleGrids idle = idle_grids(route, prefill.work != nullptr, p.live_work, p.live_decode_seqs);
  const bool capturing = (idle.prefill || idle.decode) && cuda::stream_may_be_capturing(stream);
  const bool skip_prefill_grid = idle.prefill && !capturing, skip_decode_grid = idle.decode && !capturing;
  const bool launch_decode_grid = route_decode && !skip_decode_grid;
  // Both kernels on compute capability 9.0: the decode grid starts on the SMs the
  // prefill's last CTAs leave idle (decode::Overlap::previous), so each takes its own part
  // of the split workspace (bspa_prefill_workspace_bytes sizes both; a smaller caller
  // workspace gives the prefill its part first and the decode what is left, or none).
  // The two kernels never share bytes of the workspace: whenever both run (overlapping or
  // not: the prefill leaves its split counters non-zero and writes units over what would
  // be the decode's counters), and always in a workspace the library owns, whose decode
  // counters must stay where they were zeroed.
  const bool sm90 = device_is_sm90(device.device());
  // The prefill grid's cap follows the route, not whether an idle decode grid is left out of
  // this launch: eager and captured launches plan the same split (a fixed-shape batch has
  // no mixed_work, so no cap that could change from step to step).
  const bool mixed_overlap = sm90 && any_prefill && route_decode && mixed_overlap_enabled();
  decode::Overlap overlap;
  overlap.previous = mixed_overlap && launch_decode_grid;
  const bool kept_clear = p.split.data && p.split.kept_clear_counters > 0;
  SplitWorkspace decode_workspace = p.split;
  if (p.split.data && ((any_prefill && route_decode) || kept_clear)) {
    const size_t first = std::min(p.split.bytes, prefill_split_bytes(device.device(), p.head_dim));
    prefill.split.bytes = first;
    decode_workspace.bytes = p.split.bytes - first;
    decode_workspace.data = decode_workspace.bytes ? static_cast<char *>(p.split.data) + first : nullptr;
  }
  decode::Split split;
  const int64_t indexed = static_cast<int64_t>(p.num_seqs) * p.num_kv_heads;  // counters: one per (sequence, KV head)
  bool clear_by_kernel = false;  // the counters cleared by a grid the decode grid overlaps
  if (route_decode) {
    // Rows: the launch's largest decode q (known for pool batches) times the group.
    const int32_t max_q =
        p.decode_max_q > 0 ? std::min(p.decode_max_q, route.bound) : std::min(p.max_query_len, route.bound);
    split.rows = max_q * prm.group;
    // Items to fill the GPU with: the decode sequences (all of them over device metadata,
    // where the decode ones are not known; the CTAs of the others exit at once). Units are
    // indexed by the sequence's place in the batch, so the workspace bounds the splits by
    // every sequence's units.
    const int64_t items = static_cast<int64_t>(p.decode_seqs >= 0 ? p.decode_seqs : p.num_seqs) * p.num_kv_heads;
    // The workspace: a counter per indexed item (an owned one's fixed area), then the units.
    check(!kept_clear || indexed <= p.split.kept_clear_counters, Errc::Internal, "a launch of ", p.num_seqs,
          " sequences x ", p.num_kv_heads, " KV heads over a batch workspace with ", p.split.kept_clear_counters,
          " decode counters");
    const int64_t unit_bytes = decode::unit_floats(split.rows, p.head_dim) * static_cast<int64_t>(sizeof(float));
    const size_t counter_bytes = decode::counter_bytes(kept_clear ? p.split.kept_clear_counters : indexed);
    const int64_t capacity = decode_workspace.data && decode_workspace.bytes > counter_bytes
                                 ? static_cast<int64_t>(decode_workspace.bytes - counter_bytes) / unit_bytes
                                 : 0;
    // plan_splits bounds splits by capacity / items; pass what keeps splits * indexed within it.
    const int64_t room = indexed > 0 ? capacity / indexed * items : 0;
    const int32_t sms = cuda::multiprocessor_count(device.device());
    // The most quads of warps a CTA whose shared memory the device has.
    int32_t max_quads = std::min(decode_max_quads(), decode::kernel_quads(e4m3, split.rows));
    while (max_quads > 1 && decode::shared_bytes(p.head_dim, split.rows, e4m3, max_quads) > max_shared) --max_quads;
    // The items to fill the SMs with are the decode sequences'; the grid holds every
    // indexed item's CTAs (those of sequences it skips exit at once).
    // BSPA_DECODE_SPLITS=N forces N splits where the workspace has room (a diagnostic, to
    // time the split planner's choice against others).
    const int32_t forced = forced_decode_splits();
    const decode::DecodeShape shape = decode::plan_decode_shape(
        items, indexed, p.decode_max_keys, sms, decode::ctas_per_sm(e4m3, split.rows), max_quads, room,
        /*even_out_waves=*/layout.kind == Layout::Kind::Dense, forced > 0 && forced * indexed <= capacity ? forced : 0);
    split.splits = shape.splits;
    split.quads = shape.quads;
    // A grid of one two-quad CTA an SM (batch 1 and other small batches) merges each item's
    // splits inside a thread-block cluster where the device holds all its clusters at once
    // (decode::cluster_merge_fits decides, the quads included):
    // no units through L2, no fences, no count, no counter clear (decode::Split::cluster).
    // Not beside a prefill grid, whose CTAs hold SMs of the GPCs a cluster needs whole.
    if (split.splits > 1 && sm90 && built_with_sm90a() && !any_prefill && decode_cluster_enabled())
      with_element_types(p.dtype, e4m3, [&](auto t, auto kv) {
        using T = typename decltype(t)::type;
        using KV = typename decltype(kv)::type;
        split.cluster = p.head_dim == 64
                            ? decode::cluster_merge_fits<T, KV, 64>(split.rows, split.quads, split.splits, indexed)
                            : decode::cluster_merge_fits<T, KV, 128>(split.rows, split.quads, split.splits, indexed);
      });
    if (split.splits > 1 && !split.cluster) {
      split.counters = static_cast<int32_t *>(decode_workspace.data);
      split.partials = reinterpret_cast<float *>(static_cast<char *>(decode_workspace.data) + counter_bytes);
      // A caller's workspace has no defined contents: with a prefill grid, cleared before
      // it (nothing may sit between it and the decode grid that overlaps its end); without
      // one, by a one-CTA kernel that the decode grid overlaps from its start (compute
      // capability 9.0; it waits for that kernel before its first count), which the
      // measured 1.2 us of a memset and the grid's wait for it on batch 1 made worth a
      // launch. A batch's own workspace is clear already (kept_clear_counters).
      if (!kept_clear) {
        if (any_prefill)
          cuda::check_cuda(cudaMemsetAsync(split.counters, 0, sizeof(int32_t) * indexed, stream),
                           "clearing the decode split counters");
        else
          clear_by_kernel = true;
      }
    }
  }
  // The decode grid overlaps only a prefill grid this call launched (never a caller's
  // kernel before it on the stream, whose results it may read).
  const bool prefill_launched =
      any_prefill &&
      launch_prefill(prefill, prm, stream, device.device(),
                     /*check_only=*/skip_prefill_grid, mixed_overlap ? mixed_prefill_cap(p, device.device()) : 0);
  overlap.previous = overlap.previous && prefill_launched;
  if (clear_by_kernel && launch_decode_grid) {
    decode::clear_counters(split.counters, indexed, stream);
    overlap.previous = sm90;
    split.count_after_previous = sm90;
  }
  if (launch_decode_grid)
    with_element_types(p.dtype, e4m3, [&](auto t, auto kv) {
      dispatch_decode<typename decltype(t)::type, typename decltype(kv)::type>(
          prm, p.head_dim, p.num_seqs, p.num_kv_heads, split.rows, split, overlap, stream);
    });
}

}  // namespace bspa::kernels
