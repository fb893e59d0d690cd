// Embedding lookup by i64 ids (ids checked before anything is written): forward and backward.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/nn/detail/common.hpp"

namespace jitembed::nn {

namespace detail {

inline void check_embedding(std::string_view fn, const tensor_view& ids, std::string_view table_name, const tensor_view& table,
                            std::string_view out_name, const tensor_view& out) {
  require(fn, "ids", ids, dtype::i64);
  require(fn, table_name, table);
  require(fn, out_name, out);
  require_rank(fn, table_name, table, 2);
  shape want = ids.shape();
  want.push_back(table.size(1));
  require_shape(fn, out_name, out, want);
  check_ids(fn, ids, table.size(0));
}

}  // namespace detail

// out[i, :] = table[ids[i], :]. ids i64 [...], table [V, H], out [..., H]; an id outside [0, V) throws.
inline void embedding_forward(const tensor_view& ids, const tensor_view& table, const tensor_view& out) {
  detail::check_embedding("embedding_forward", ids, "table", table, "out", out);
  const std::int64_t h = table.size(1);
  const std::int64_t* id = ids.data<const std::int64_t>();
  const float* t = table.data<const float>();
  float* o = out.data<float>();
  for (std::uint64_t i = 0; i < ids.numel(); ++i) std::copy(t + id[i] * h, t + (id[i] + 1) * h, o + static_cast<std::int64_t>(i) * h);
}

// dtable[ids[i], :] += dout[i, :] (repeated ids accumulate). ids i64 [...], dout [..., H], dtable [V, H].
inline void embedding_backward(const tensor_view& ids, const tensor_view& dout, const tensor_view& dtable) {
  detail::check_embedding("embedding_backward", ids, "dtable", dtable, "dout", dout);
  const std::int64_t h = dtable.size(1);
  const std::int64_t* id = ids.data<const std::int64_t>();
  const float* g = dout.data<const float>();
  float* t = dtable.data<float>();
  for (std::uint64_t i = 0; i < ids.numel(); ++i) {
    float* row = t + id[i] * h;
    const float* src = g + static_cast<std::int64_t>(i) * h;
    for (std::int64_t j = 0; j < h; ++j) row[j] += src[j];
  }
}

}  // namespace jitembed::nn
