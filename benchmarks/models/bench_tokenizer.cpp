// bench_tokenizer: hf_tokenizer throughput on the caption corpus, one thread (bench_tokenizer.py runs it next to the
// Python tokenizers library and prints the ratio). One JSON object per tokenizer after the table.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "jitembed/models/hf_tokenizer.hpp"

namespace {

std::vector<std::string> read_corpus(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string d{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::string> out;
  if (d.size() < 12 || d.compare(0, 8, "JTKCORP1") != 0) return out;
  std::uint32_t n;
  std::memcpy(&n, d.data() + 8, 4);
  std::size_t at = 12;
  for (std::uint32_t i = 0; i < n && at + 4 <= d.size(); ++i) {
    std::uint32_t len;
    std::memcpy(&len, d.data() + at, 4);
    at += 4;
    if (at + len > d.size()) break;
    out.emplace_back(d.substr(at, len));
    at += len;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  jitembed::bench::command_line cli("hf_tokenizer throughput on a caption corpus (one thread)");
  std::string dir;
  std::vector<std::string> names{"clip", "gpt2", "llama3", "bert", "t5"};
  int passes = 3;
  // checked after parsing (not ->required()): an unknown flag is then named first, as every program here does
  cli.app.add_option("--dir", dir, "make_corpus.py's output: corpus.bin and <name>.json (required)");
  cli.app.add_option("--tokenizers", names, "tokenizer.json names in --dir");
  cli.app.add_option("--passes", passes, "timed passes over the corpus (the best is reported)")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(cli.app, argc, argv);
  if (dir.empty()) {
    std::fprintf(stderr, "bench_tokenizer: --dir is required (tests/tokenizers/make_corpus.py's output)\n");
    return 2;
  }

  const auto corpus = read_corpus(std::filesystem::path(dir) / "corpus.bin");
  if (corpus.empty()) {
    std::fprintf(stderr, "bench_tokenizer: no corpus in %s (run tests/tokenizers/make_corpus.py --out %s)\n",
                 dir.c_str(), dir.c_str());
    return 1;
  }
  std::vector<std::string> lines;
  std::printf("%-10s %12s %14s %12s\n", "tokenizer", "captions", "captions/s", "tokens");
  for (const auto& name : names) {
    auto tok = jitembed::models::hf_tokenizer::open(std::filesystem::path(dir) / (name + ".json"));
    if (!tok) {
      std::fprintf(stderr, "bench_tokenizer: %s\n", tok.error().message.c_str());
      return 1;
    }
    std::uint64_t tokens = 0;
    double best = 1e300;
    for (int p = 0; p <= passes;
         ++p) {  // pass 0 warms the word cache, as the library's cache is warm after its first pass
      tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& c : corpus) {
        auto e = tok->encode(c);
        if (!e) {
          std::fprintf(stderr, "bench_tokenizer: %s: %s\n", name.c_str(), e.error().message.c_str());
          return 1;
        }
        tokens += e->ids.size();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p > 0 && s < best) best = s;
    }
    const double rate = static_cast<double>(corpus.size()) / best;
    std::printf("%-10s %12zu %14.0f %12llu\n", name.c_str(), corpus.size(), rate,
                static_cast<unsigned long long>(tokens));
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"bench\": \"tokenizers/cpp/%s\", \"captions\": %zu, \"captions_per_s\": %.1f, \"tokens\": %llu}",
                  name.c_str(), corpus.size(), rate, static_cast<unsigned long long>(tokens));
    lines.emplace_back(buf);
  }
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return 0;
}
