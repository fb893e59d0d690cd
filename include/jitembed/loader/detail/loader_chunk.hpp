// What a chunk of B samples carries through loader_state: the model groups its requests are made for, each
// sample's rows and cache keys per group, the chunk's hold count, and one embed request's rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/cache/key.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/loader/step.hpp"

namespace jitembed::loader::detail {

// Specs that share (model, field kind) or (model, field name): one request row and one cache entry per sample.
struct loader_group {
  std::string model;
  format::field_kind kind = format::field_kind::image;
  std::string field;                 // embedding_spec::field (empty: the first field of `kind`)
  std::string input;                 // with `field`: embedding_spec::input as given (empty: by the field)
  std::vector<std::size_t> specs;    // indices into options.embeddings
  std::vector<std::string> outputs;  // asked for; empty: every output
  client::model_identity identity;           // cache key inputs (only fetched with a cache)
};

// How a sample's row of a group travels: BYTES (raw field bytes) or a typed tensor row.
struct row_type {
  std::string input;
  std::string datatype = "BYTES";
  std::vector<std::int64_t> shape;  // typed rows: the tensor's shape
  friend bool operator==(const row_type&, const row_type&) = default;
};

struct chunk_sample {
  std::uint64_t epoch = 0, pos = 0;
  embedded_sample out;
  format::sample src;                           // keeps the field bytes alive until the chunk completes
  std::vector<std::string> texts;               // per group: owned UTF-8 of a text field
  std::vector<bytes_view> content;              // per group: the bytes sent and hashed
  std::vector<char> has;                        // per group: the sample has a field of that kind
  std::vector<row_type> types;                  // per group: how its row travels (requests hold one type)
  std::vector<tensor> decoded;                  // per group: a compressed tensor field, decoded
  std::vector<cache::cache_key> keys;           // per group (with a cache)
  std::vector<named_tensors> rows;                 // per group: this sample's outputs
  std::vector<std::optional<error_info>> errors;  // per group
};

struct loader_chunk {
  std::vector<chunk_sample> samples;
  std::size_t pending = 0;  // requests not finished + 1 while the submitting worker holds it (under mu_)
};

struct loader_request {
  std::shared_ptr<loader_chunk> chunk;
  std::size_t group = 0;
  std::vector<std::size_t> rows;  // sample indices in the chunk
  int attempt = 0;
  std::optional<std::uint64_t> id;  // client::jit_client::request_id (for cancel())
};

}  // namespace jitembed::loader::detail
