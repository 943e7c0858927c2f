// Replays fuzz inputs without libFuzzer: each argument is a file or a directory of
// files, each file one LLVMFuzzerTestOneInput call. Used by the CTest test
// fuzz_corpus_replay in any build (gcc included), so the corpus and every past crash
// stay regression tests.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

static int replay(const fs::path &file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::vector<fs::path> inputs;
    if (fs::is_directory(arg)) {
      for (const auto &e : fs::directory_iterator(arg))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.push_back(arg);
    }
    std::sort(inputs.begin(), inputs.end());
    for (const auto &p : inputs) {
      errors += replay(p);
      ++files;
    }
  }
  std::printf("replayed %d inputs\n", files);
  return errors != 0 || files == 0;
}
