// bspa-demo: a serving-workload replay through bspa's public C ABI. See --help.
#include <bspa/bspa.h>

#include <cstdio>
#include <exception>

#include "clock.hpp"
#include "cli.hpp"
#include "replay.hpp"
#include "report.hpp"
#include "status.hpp"

namespace {

// Picks the device; "auto" means CUDA whenever the library sees a GPU.
bool choose_device(const demo::Options &o, demo::Device &device, std::string &name) {
  int32_t gpus = 0;
  DEMO_OK(bspa_device_count(kDLCUDA, &gpus));
  const bool cuda = o.device == "cuda" || (o.device == "auto" && gpus > 0);
  if (cuda && gpus == 0) {
    std::fprintf(stderr, "bspa-demo: --device cuda but the library sees no GPU (%s)\n", bspa_build_info());
    return false;
  }
  if (cuda && o.device_id >= gpus) {
    std::fprintf(stderr, "bspa-demo: --device-id = %d but only %d GPU(s) are visible\n", o.device_id, gpus);
    return false;
  }
  device.type = cuda ? kDLCUDA : kDLCPU;
  device.id = cuda ? o.device_id : 0;
  name = cuda ? "cuda:" + std::to_string(o.device_id) : "cpu";
  return true;
}

bspa_dtype choose_dtype(const demo::Options &o, demo::Device device) {
  if (o.dtype == "f32") return BSPA_DTYPE_F32;
  if (o.dtype == "f16") return BSPA_DTYPE_F16;
  if (o.dtype == "bf16") return BSPA_DTYPE_BF16;
  if (o.dtype == "fp8") return BSPA_DTYPE_FP8_E4M3;  // pages; q, out and K/V written stay bf16
  return device.cuda() ? BSPA_DTYPE_BF16 : BSPA_DTYPE_F32;
}

}  // namespace

int main(int argc, char **argv) {
  demo::Options options;
  bool help = false;
  if (!demo::parse_options(argc, argv, options, &help)) return 2;
  if (help) {
    demo::print_usage(argv[0]);
    return 0;
  }
  demo::Report report;
  report.command = options.command_line;
  try {
    demo::Device device;
    if (!choose_device(options, device, report.device)) return 3;
    // CUDA graphs need the CUDA device (and a demo built with the CUDA runtime): a bad flag.
    bool graphs_ok = device.cuda();
#ifndef BSPA_HAVE_CUDA
    graphs_ok = false;
#endif
    if (options.graphs && !graphs_ok) {
      std::fprintf(stderr,
                   "bspa-demo: --graphs replays CUDA graphs and needs the CUDA device, but this run is on %s%s\n"
                   "(use --launch plan or --launch fixed for the same steps launched eagerly; see --help)\n",
                   report.device.c_str(), device.cuda() ? " in a bspa-demo built without the CUDA runtime" : "");
      return 2;
    }
    const bspa_dtype dtype = choose_dtype(options, device);
    report.dtype = demo::dtype_name(dtype);
    report.page_size = options.page_size;
    const bool attention = !(options.trace.size() && options.no_attention);
    report.num_layers = attention ? options.model.num_layers : 0;
    for (int32_t l = 0; l < report.num_layers; ++l) report.sparse_layers += demo::LayerLayouts::sparse(l);
    std::printf("%s\n", bspa_build_info());
    const double t0 = demo::now_s();
    if (options.trace.empty()) {
      report.mode = "synthetic";
      std::printf(
          "synthetic workload: %d conversations x %d turns from %d tenants, system prompt %d tokens, on %s (%s)\n",
          options.workload.conversations, options.workload.turns, options.workload.tenants,
          options.workload.system_tokens, report.device.c_str(), report.dtype.c_str());
      demo::replay_synthetic(options, device, dtype, report);
    } else {
      report.mode = "trace";
      demo::replay_trace(options, device, dtype, report);
    }
    report.wall_s = demo::now_s() - t0;
  } catch (const demo::InputError &e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nbspa-demo: %s\n", e.what());
    return 4;
  } catch (const std::exception &e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nbspa-demo: %s\n", e.what());
    return 3;
  }
  demo::print_summary(report, options.trace.size() && options.no_attention);
  const bool json_ok = options.json.empty() || demo::write_json(report, options.json);
  return report.verified() && json_ok ? 0 : 1;
}
