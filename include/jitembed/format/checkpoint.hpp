// Sharded training checkpoints in the sample format: each rank writes its own shard of each module it holds
// (parameters and optimizer state as tensor fields) to ROOT/step-<12 digits>/<module>/shard-<k>-of-<n>.jer,
// one checksummed record per file, written to a temporary name, flushed and renamed, so a shard is either
// whole or absent. A step is complete when every shard of every expected module is there: a crash mid-save
// leaves the previous complete step as the one to resume from.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

// Which shard: the training step it holds, the module's name (a directory name: no '/', not empty, not
// "." or ".."), this shard's index and the module's shard count (its degree).
struct checkpoint_shard_id {
  std::uint64_t step = 0;
  std::string module;
  int shard = 0;
  int shards = 1;
};

namespace detail {

inline result<void> check_shard_id(const checkpoint_shard_id& id) {
  if (id.module.empty() || id.module == "." || id.module == ".." || id.module.find('/') != std::string::npos ||
      id.module.find('\0') != std::string::npos)
    return fail(errc::invalid_argument, "checkpoint: module name '" + id.module + "' is not a directory name");
  if (id.shards < 1 || id.shard < 0 || id.shard >= id.shards)
    return fail(errc::invalid_argument, "checkpoint: shard " + std::to_string(id.shard) + " of " +
                                            std::to_string(id.shards) + " is out of range");
  return {};
}

inline std::filesystem::path step_dir(const std::filesystem::path& root, std::uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%012llu", static_cast<unsigned long long>(step));
  return root / name;
}

inline std::filesystem::path shard_path(const std::filesystem::path& root, const checkpoint_shard_id& id) {
  return step_dir(root, id.step) / id.module /
         ("shard-" + std::to_string(id.shard) + "-of-" + std::to_string(id.shards) + ".jer");
}

inline result<void> write_all(int fd, bytes_view b, const std::string& path) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0) return fail(errc::io_error, "checkpoint: cannot write " + path);
    b = b.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace detail

// Writes one shard: `tensors` (contiguous CPU tensors, names unique, none starting with "checkpoint/") plus
// the id as fields "checkpoint/step", "checkpoint/shard" and "checkpoint/module". Replaces a shard of the
// same id. io_error when the directory or file cannot be written; invalid_argument for a bad id or tensor.
inline result<void> save_checkpoint_shard(const std::filesystem::path& root, const checkpoint_shard_id& id,
                                          const named_tensors& tensors) {
  JITEMBED_TRY(detail::check_shard_id(id));
  const std::int64_t step_v = static_cast<std::int64_t>(id.step);
  const std::int64_t shard_v[2] = {id.shard, id.shards};
  record_builder b;
  JITEMBED_TRY(b.add_tensor("checkpoint/step", tensor_view(&step_v, dtype::i64, shape{1})));
  JITEMBED_TRY(b.add_tensor("checkpoint/shard", tensor_view(shard_v, dtype::i64, shape{2})));
  JITEMBED_TRY(b.add_text("checkpoint/module", id.module, 0));
  for (const auto& [name, t] : tensors) {
    if (name.starts_with("checkpoint/"))
      return fail(errc::invalid_argument, "checkpoint: tensor name '" + name + "' uses the reserved prefix");
    JITEMBED_TRY(b.add_tensor(name, t.view()));
  }
  JITEMBED_ASSIGN_OR_RETURN(auto bytes, b.finish());
  const auto final_path = detail::shard_path(root, id);
  std::error_code ec;
  std::filesystem::create_directories(final_path.parent_path(), ec);
  if (ec)
    return fail(errc::io_error, "checkpoint: cannot create " + final_path.parent_path().string() + ": " + ec.message());
  const std::string tmp = final_path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(errc::io_error, "checkpoint: cannot create " + tmp);
  auto written = detail::write_all(fd, bytes_view(bytes.data(), bytes.size()), tmp);
  const bool synced = written && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced) {
    std::filesystem::remove(tmp, ec);
    return written ? fail(errc::io_error, "checkpoint: cannot flush " + tmp) : written.error();
  }
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) return fail(errc::io_error, "checkpoint: rename to " + final_path.string() + ": " + ec.message());
  return {};
}

// Reads one shard back: its tensors in the saved order (sharing the file's bytes), checksums verified.
// not_found when the file is absent; the record's own errors (checksum_mismatch, truncated, ...) for a damaged
// one; invalid_argument when the file holds another step, module or shard count than `id` names.
inline result<named_tensors> load_checkpoint_shard(const std::filesystem::path& root, const checkpoint_shard_id& id,
                                                   const decode_limits& limits = {}) {
  JITEMBED_TRY(detail::check_shard_id(id));
  const auto path = detail::shard_path(root, id);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return fail(errc::not_found, "checkpoint: no shard " + path.string());
  if (size > limits.max_record_bytes)
    return fail(errc::limit_exceeded, "checkpoint: " + path.string() + " is larger than max_record_bytes");
  auto buf = std::make_shared<byte_buffer>(static_cast<std::size_t>(size));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errc::io_error, "checkpoint: cannot open " + path.string());
  std::size_t got = 0;
  while (got < buf->size()) {
    const ssize_t n = ::read(fd, buf->data() + got, buf->size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (got != buf->size()) return fail(errc::io_error, "checkpoint: short read of " + path.string());
  auto rec = record_view::parse(bytes_view(buf->data(), buf->size()), limits, keep_alive(buf));
  if (!rec) return fail(rec.code(), "checkpoint: " + path.string() + ": " + rec.error().message);
  named_tensors out;
  std::optional<std::int64_t> step;
  std::optional<std::pair<std::int64_t, std::int64_t>> shard;
  std::string module;
  for (const auto& f : *rec) {
    if (f.name() == "checkpoint/module") {
      JITEMBED_ASSIGN_OR_RETURN(module, f.text(limits));
      continue;
    }
    auto t = f.decode(limits);
    if (!t) return fail(t.code(), "checkpoint: " + path.string() + ": " + t.error().message);
    if (f.name() == "checkpoint/step" && t->dtype() == dtype::i64 && t->numel() == 1) {
      step = *t->data<std::int64_t>();
    } else if (f.name() == "checkpoint/shard" && t->dtype() == dtype::i64 && t->numel() == 2) {
      shard = std::pair{t->data<std::int64_t>()[0], t->data<std::int64_t>()[1]};
    } else {
      out.emplace_back(std::string(f.name()), std::move(*t));
    }
  }
  if (!step || !shard || module.empty())
    return fail(errc::corrupt_data, "checkpoint: " + path.string() + " has no checkpoint/ id fields");
  if (static_cast<std::uint64_t>(*step) != id.step || module != id.module || shard->first != id.shard ||
      shard->second != id.shards)
    return fail(errc::invalid_argument, "checkpoint: " + path.string() + " holds step " + std::to_string(*step) +
                                            ", module '" + module + "', shard " + std::to_string(shard->first) +
                                            " of " + std::to_string(shard->second));
  return out;
}

// The newest step under `root` with every shard of every (module, shard count) in `modules`; nullopt when
// none is complete (or root does not exist). Temporary files of an interrupted save are ignored.
inline std::optional<std::uint64_t> latest_checkpoint(const std::filesystem::path& root,
                                                      const std::vector<std::pair<std::string, int>>& modules) {
  std::error_code ec;
  std::optional<std::uint64_t> best;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("step-") || name.size() != 17) continue;
    std::uint64_t step = 0;
    bool digits = true;
    for (char c : std::string_view(name).substr(5)) {
      digits = digits && c >= '0' && c <= '9';
      step = step * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!digits || (best && step <= *best)) continue;
    bool complete = true;
    for (const auto& [module, shards] : modules)
      for (int k = 0; complete && k < shards; ++k)
        complete = std::filesystem::is_regular_file(detail::shard_path(root, {step, module, k, shards}), ec);
    if (complete) best = step;
  }
  return best;
}

}  // namespace jitembed::format
