// The model concept (an embedder the service, the cache and the precompute tool can drive) and the
// metadata types it exposes: tensor_meta, named_tensors, modality.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::models {

// Name, element type and shape of one input or output; -1 marks a variable extent.
struct tensor_meta {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;

  friend bool operator==(const tensor_meta&, const tensor_meta&) = default;
};

// The outputs of one item, in the order of model::outputs() (find_tensor(outs, name) looks one up).
using jitembed::named_tensors;

// Which raw sample field a model consumes (how a data set walker routes fields to it).
enum class modality : std::uint8_t { image, video, text };

constexpr std::string_view to_string(modality m) noexcept {
  switch (m) {
    case modality::image: return "image";
    case modality::video: return "video";
    case modality::text: return "text";
  }
  return "unknown";
}

// An embedder.
//
// Requirements on M (every member const and safe to call from several threads at once):
// - `m.name()`: a stable model name ("image-latent"); part of every cache key.
// - `m.version()`: a fingerprint that changes whenever the outputs for the same preprocessed input
//   could change (weights, seed, algorithm revision, output dtype); part of every cache key.
// - `m.preprocess_key()`: the canonical preprocessing string (cache::preprocess_params::str()): every
//   parameter that changes what preprocess() makes of raw bytes (resize bucket, frame count, max text
//   length). Part of every cache key.
// - `m.input_modality()`: which raw field kind preprocess() accepts.
// - `m.inputs()`, `m.outputs()`: tensor_meta of one preprocessed item and of one item's outputs.
// - `m.max_batch_size()`: the largest batch run() accepts (>= 1).
// - `m.device()`: where run() computes.
// - `m.preprocess(raw, limits)`: untrusted raw field bytes (JPEG, video container, UTF-8) -> the input
//   tensor of one item, under limits; errors are specific errc values, never crashes.
// - `m.run(batch)`: one named_tensors per item, in order, each in outputs() order. An item whose dtype or
//   shape does not match inputs() fails the whole call (errc::dtype_mismatch / errc::invalid_argument);
//   a batch larger than max_batch_size() is errc::limit_exceeded. Deterministic models give bit-identical
//   outputs for an item whatever batch it is run in.
// Optional: `m.has_preprocess()` (bool): false when the model has no preprocessing of raw bytes and is
// served only through its declared input tensor (a Triton tensor model); models without the member
// preprocess (has_preprocess(m) is true).
template <class M>
concept model = requires(const M& m, bytes_view raw, const decode_limits& limits, std::span<const tensor> batch) {
  { m.name() } -> std::convertible_to<std::string_view>;
  { m.version() } -> std::convertible_to<std::string_view>;
  { m.preprocess_key() } -> std::convertible_to<std::string_view>;
  { m.input_modality() } -> std::same_as<modality>;
  { m.inputs() } -> std::convertible_to<std::span<const tensor_meta>>;
  { m.outputs() } -> std::convertible_to<std::span<const tensor_meta>>;
  { m.max_batch_size() } -> std::convertible_to<std::size_t>;
  { m.device() } -> std::same_as<device>;
  { m.preprocess(raw, limits) } -> std::same_as<result<tensor>>;
  { m.run(batch) } -> std::same_as<result<std::vector<named_tensors>>>;
};

// Whether `m` turns raw field bytes into its input (preprocess()), or takes only its declared input tensor.
template <model M>
bool has_preprocess(const M& m) {
  if constexpr (requires { { m.has_preprocess() } -> std::convertible_to<bool>; }) return m.has_preprocess();
  else return true;
}

}  // namespace jitembed::models
