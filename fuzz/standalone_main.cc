// Corpus replay without libFuzzer (builds that are not SLUICE_FUZZ=ON, e.g. gcc): runs the target
// once on every file named on the command line and every file in every directory named there.
// Arguments starting with '-' (libFuzzer flags such as -runs=0) are ignored, so the same ctest
// command line serves both drivers. Fails when a directory is empty or a path is unreadable.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool run_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // A heap copy of exactly the input's size, as libFuzzer passes it (overreads stay visible).
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t runs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      size_t here = 0;
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (!e.is_regular_file()) continue;
        if (!run_file(e.path())) return 1;
        ++here;
      }
      if (here == 0) {
        std::fprintf(stderr, "corpus directory %s is empty\n", arg.c_str());
        return 1;
      }
      runs += here;
    } else {
      if (!run_file(arg)) return 1;
      ++runs;
    }
  }
  std::printf("replayed %zu input(s) without a failure\n", runs);
  return runs > 0 ? 0 : 1;
}
