// text-embed: a deterministic, not learned reference text encoder: UTF-8 -> byte tokens -> hashed byte
// n-grams -> seeded projection -> "sequence" [L, D] + "mask" [L] (T5-shaped) and "pooled" [D] (CLIP-shaped).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/text.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/detail/kernels.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

struct text_embed_options {
  int max_length = 128;              // L: tokens kept (longer text is cut); 1..512
  int dim = 768;                     // D: 1..4096
  int ngram_min = 1, ngram_max = 3;  // byte n-gram sizes hashed at each position; 1 <= min <= max <= 8
  int hash_buckets = 4096;           // rows of the seeded projection table; 1..65536
  std::uint64_t seed = 0x6a6974656d626564ull;
  dtype output_dtype = dtype::f32;   // of "sequence" and "pooled": f32, bf16 or f16
  int work = 0;                      // extra dim x dim matmuls per item; 0..1000
  std::size_t max_batch_size = 256;
};

namespace detail {
inline constexpr std::string_view kTextEmbedRevision = "2";  // 2: positions without an n-gram are zero, not NaN
}

// Models models::model. create() checks the options (errc::invalid_argument); the default constructor uses
// the defaults, which are valid.
// Definition (docs/models.md): tokens t[0..n) are the text's UTF-8 bytes (n <= L). For each position p
// and n-gram size g with g <= p + 1, h = XXH3-64(t[p-g+1..p] as bytes, seed + g), row = h mod
// hash_buckets, sign = -1 if the top bit of h is set else +1; sequence[p] = (sum of sign * R[row]) /
// sqrt(number of n-grams at p), with R[row][d] = unit_uniform(splitmix64(seed ^ (row * D + d))) * sqrt(3)
// (unit variance). Rows p >= n are 0 and mask[p] = (p < n). pooled = the mean of sequence[0..n) in f32
// (0 for empty text), then converted to the output dtype.
class text_embed {
 public:
  text_embed() : text_embed(text_embed_options{}) {}
  static result<text_embed> create(const text_embed_options& opts = {}) {
    auto bad = [](const std::string& m) { return fail(errc::invalid_argument, "text-embed: " + m); };
    if (opts.max_length < 1 || opts.max_length > 512) return bad("max_length " + std::to_string(opts.max_length) + " not in [1, 512]");
    if (opts.dim < 1 || opts.dim > 4096) return bad("dim " + std::to_string(opts.dim) + " not in [1, 4096]");
    if (opts.ngram_min < 1 || opts.ngram_max < opts.ngram_min || opts.ngram_max > 8)
      return bad("ngram sizes " + std::to_string(opts.ngram_min) + ".." + std::to_string(opts.ngram_max) + " (need 1 <= min <= max <= 8)");
    if (opts.hash_buckets < 1 || opts.hash_buckets > 65536) return bad("hash_buckets " + std::to_string(opts.hash_buckets) + " not in [1, 65536]");
    JITEMBED_TRY(detail::check_output_dtype("text-embed", opts.output_dtype));
    JITEMBED_TRY(detail::check_work("text-embed", opts.work, opts.dim));
    if (opts.max_batch_size < 1) return bad("max_batch_size 0");
    return text_embed(opts);
  }

  static constexpr std::string_view kName = "text-embed";
  std::string_view name() const noexcept { return kName; }
  std::string_view version() const noexcept { return version_; }
  std::string_view preprocess_key() const noexcept { return preprocess_key_; }
  modality input_modality() const noexcept { return modality::text; }
  std::span<const tensor_meta> inputs() const noexcept { return inputs_; }
  std::span<const tensor_meta> outputs() const noexcept { return outputs_; }
  std::size_t max_batch_size() const noexcept { return opts_.max_batch_size; }
  jitembed::device device() const noexcept { return device::cpu(); }
  const text_embed_options& options() const noexcept { return opts_; }

  // The projection row of a hash bucket (D floats).
  std::span<const float> projection_row(std::size_t row) const noexcept {
    const auto d = static_cast<std::size_t>(opts_.dim);
    return {table_->data() + row * d, d};
  }

  // UTF-8 (validated) -> [n] i32 byte tokens, n = min(bytes, max_length).
  result<tensor> preprocess(bytes_view utf8, const decode_limits& limits) const {
    if (utf8.size() > limits.max_decoded_bytes)
      return fail(errc::limit_exceeded, "text-embed: " + std::to_string(utf8.size()) + " bytes > max_decoded_bytes " +
                                            std::to_string(limits.max_decoded_bytes));
    if (auto ok = codec::validate_utf8(utf8); !ok) return fail(ok.code(), "text-embed: " + ok.error().message);
    const std::size_t n = std::min(utf8.size(), static_cast<std::size_t>(opts_.max_length));
    tensor t = tensor::empty({static_cast<std::int64_t>(n)}, dtype::i32);
    auto* p = t.data<std::int32_t>();
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::int32_t>(std::to_integer<std::uint8_t>(utf8[i]));
    return t;
  }
  result<tensor> preprocess(std::string_view utf8, const decode_limits& limits = {}) const {
    return preprocess(as_bytes_view(utf8), limits);
  }

  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    JITEMBED_TRY(detail::check_batch(kName, batch, opts_.max_batch_size, inputs_[0]));
    const auto l = static_cast<std::size_t>(opts_.max_length), d = static_cast<std::size_t>(opts_.dim);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].size(0) > opts_.max_length)
        return fail(errc::invalid_argument, "text-embed: batch[" + std::to_string(i) + "] has " + std::to_string(batch[i].size(0)) +
                                                " tokens > max_length " + std::to_string(opts_.max_length));
      const auto* tok = batch[i].data<std::int32_t>();
      for (std::int64_t p = 0; p < batch[i].size(0); ++p)
        if (tok[p] < 0 || tok[p] > 255)
          return fail(errc::invalid_argument, "text-embed: batch[" + std::to_string(i) + "] token " + std::to_string(p) + " = " +
                                                  std::to_string(tok[p]) + " is not a byte");
    }
    std::vector<float> seq(l * d), pooled(d);
    std::vector<named_tensors> out;
    out.reserve(batch.size());
    for (const tensor& item : batch) {
      const auto n = static_cast<std::size_t>(item.size(0));
      std::uint8_t bytes[512];
      for (std::size_t p = 0; p < n; ++p) bytes[p] = static_cast<std::uint8_t>(item.data<std::int32_t>()[p]);
      std::fill(seq.begin(), seq.end(), 0.f);
      std::fill(pooled.begin(), pooled.end(), 0.f);
      tensor mask = tensor::zeros({static_cast<std::int64_t>(l)}, dtype::u8);
      for (std::size_t p = 0; p < n; ++p) {
        float* row = seq.data() + p * d;
        int count = 0;
        for (int g = opts_.ngram_min; g <= opts_.ngram_max && static_cast<std::size_t>(g) <= p + 1; ++g, ++count) {
          const std::uint64_t h = xxh3_64(bytes_view(reinterpret_cast<const std::byte*>(bytes + p + 1 - g), static_cast<std::size_t>(g)),
                                          opts_.seed + static_cast<std::uint64_t>(g));
          const float sign = (h >> 63) ? -1.f : 1.f;
          const float* r = table_->data() + (h % static_cast<std::uint64_t>(opts_.hash_buckets)) * d;
          for (std::size_t k = 0; k < d; ++k) row[k] += sign * r[k];
        }
        // A position shorter than ngram_min has no n-gram: its row stays zero (not 0 * inf = NaN).
        const float scale = count ? 1.f / std::sqrt(static_cast<float>(count)) : 0.f;
        for (std::size_t k = 0; k < d; ++k) {
          row[k] *= scale;
          pooled[k] += row[k];
        }
        mask.data<std::uint8_t>()[p] = 1;
      }
      if (n > 0)
        for (auto& v : pooled) v /= static_cast<float>(n);
      detail::sink(detail::run_work(opts_.work, opts_.dim, std::span<const float>(seq.data(), n * d), 0x74657874ull));
      named_tensors nt;
      nt.emplace_back("sequence", detail::to_output(seq, opts_.output_dtype, {static_cast<std::int64_t>(l), static_cast<std::int64_t>(d)}));
      nt.emplace_back("mask", std::move(mask));
      nt.emplace_back("pooled", detail::to_output(pooled, opts_.output_dtype, {static_cast<std::int64_t>(d)}));
      out.push_back(std::move(nt));
    }
    return out;
  }

 private:
  // The options are checked (create()).
  explicit text_embed(const text_embed_options& opts) : opts_(opts) {
    const std::int64_t l = opts.max_length, d = opts.dim;
    inputs_ = {{"tokens", dtype::i32, {-1}}};
    outputs_ = {{"sequence", opts.output_dtype, {l, d}}, {"mask", dtype::u8, {l}}, {"pooled", opts.output_dtype, {d}}};
    version_ = preprocess_params{}
                   .set("revision", detail::kTextEmbedRevision)
                   .set("dim", opts.dim)
                   .set("ngram", {opts.ngram_min, opts.ngram_max})
                   .set("hash_buckets", opts.hash_buckets)
                   .set("seed", opts.seed)
                   .set("dtype", to_string(opts.output_dtype))
                   .str();
    preprocess_key_ = preprocess_params{}.set("max_length", opts.max_length).set("tokens", "utf8-bytes").str();
    auto table = std::make_shared<std::vector<float>>(static_cast<std::size_t>(opts.hash_buckets) * static_cast<std::size_t>(d));
    const float unit = std::sqrt(3.f);
    for (std::size_t i = 0; i < table->size(); ++i) (*table)[i] = detail::unit_uniform(detail::splitmix64(opts.seed ^ i)) * unit;
    table_ = std::move(table);
  }
  text_embed_options opts_;
  std::vector<tensor_meta> inputs_, outputs_;
  std::string version_, preprocess_key_;
  std::shared_ptr<const std::vector<float>> table_;
};

static_assert(model<text_embed>);

}  // namespace jitembed::models
