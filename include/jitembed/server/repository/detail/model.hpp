// The model repository's internals: the fingerprinted model wrapper, the version directory's hash, and the
// parameters the repository handles itself (server/repository/model_repository.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::server::detail {

// A repository model: the backend's model with a fingerprint (version()) made of the version directory's
// file bytes and the config's result-changing fields, so new weights change every cache key and renaming
// the version directory does not.
class fingerprinted_model {
 public:
  fingerprinted_model(models::any_model m, std::string version) : m_(std::move(m)), version_(std::move(version)) {}
  std::string_view name() const { return m_.name(); }
  std::string_view version() const noexcept { return version_; }
  std::string_view preprocess_key() const { return m_.preprocess_key(); }
  models::modality input_modality() const { return m_.input_modality(); }
  std::span<const models::tensor_meta> inputs() const { return m_.inputs(); }
  std::span<const models::tensor_meta> outputs() const { return m_.outputs(); }
  std::size_t max_batch_size() const { return m_.max_batch_size(); }
  jitembed::device device() const { return m_.device(); }
  result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const { return m_.preprocess(raw, limits); }
  bool has_preprocess() const { return m_.has_preprocess(); }
  result<std::vector<models::named_tensors>> run(std::span<const tensor> batch) const { return m_.run(batch); }

 private:
  models::any_model m_;
  std::string version_;
};

// XXH3-128 over every regular file under `dir` (relative path, size, bytes; paths sorted), so the hash
// does not depend on the directory's own name.
inline result<hash128> hash_tree(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(fs::relative(it->path(), dir, ec));
  if (ec) return fail(errc::io_error, dir.string() + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  hasher128 h;
  std::vector<char> buf(1 << 20);
  const auto bytes = [](const void* p, std::size_t n) { return bytes_view(static_cast<const std::byte*>(p), n); };
  for (const auto& rel : files) {
    const std::string r = rel.generic_string();
    const std::uint64_t size = fs::file_size(dir / rel, ec);
    if (ec) return fail(errc::io_error, (dir / rel).string() + ": " + ec.message());
    h.update(bytes(r.data(), r.size() + 1));  // with its terminating NUL: names cannot run into sizes
    h.update(bytes(&size, sizeof size));
    std::ifstream in(dir / rel, std::ios::binary);
    if (!in) return fail(errc::io_error, (dir / rel).string() + ": cannot open");
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      h.update(bytes(buf.data(), static_cast<std::size_t>(in.gcount())));
    }
  }
  return h.digest();
}

// Parameters the repository applies itself (serving settings, for every backend).
inline constexpr std::string_view kServingParams[] = {"max_inflight_rows", "idle_dispatch", "sleep_us", "sleep_us_per_row"};
// Parameters accepted and ignored: Triton PyTorch backend knobs (speed and memory, not results) and the
// identities a Triton repository publishes for clients (jitembed computes its own).
inline constexpr std::string_view kIgnoredParams[] = {
    "DISABLE_OPTIMIZED_EXECUTION", "INFERENCE_MODE", "DISABLE_CUDNN", "ENABLE_WEIGHT_SHARING", "ENABLE_CACHE_CLEANING",
    "INTER_OP_THREAD_COUNT", "INTRA_OP_THREAD_COUNT", "ENABLE_JIT_EXECUTOR", "ENABLE_JIT_PROFILING", "ENABLE_NVFUSER",
    "ENABLE_TENSOR_FUSER", "fingerprint", "preprocess_key"};

template <std::size_t N>
bool listed(const std::string_view (&list)[N], std::string_view k) {
  return std::find(std::begin(list), std::end(list), k) != std::end(list);
}

inline bool is_version_name(const std::string& s) { return is_decimal(s) && s.front() != '0'; }

}  // namespace jitembed::server::detail
