// Replay main for fuzz targets: feeds every file (or every file under every directory) given on the
// command line to LLVMFuzzerTestOneInput once. Lets CI build and replay the seed corpus without libFuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

static int replay_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Copy into an exact-size heap block so out-of-bounds reads are visible to ASan / valgrind.
  std::vector<std::uint8_t> exact(buf.begin(), buf.end());
  LLVMFuzzerTestOneInput(exact.data(), exact.size());
  return 1;
}

int main(int argc, char** argv) {
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) count += replay_file(e.path());
    } else {
      count += replay_file(p);
    }
  }
  std::printf("replayed %d inputs\n", count);
  return count > 0 ? 0 : 1;  // an empty corpus is a misconfiguration, not a pass
}
