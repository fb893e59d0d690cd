// The bytes the boundary should receive in one step (all ranks together), per arm: a formula to hold the
// communicators' own counts against (hybrid_parallel's table, bench_parallel hybrid), not a substitute.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "step.hpp"

namespace hybrid {

struct boundary_formula {
  std::int64_t forward = 0, backward = 0;  // bytes received: the activation's way, the gradient's way
  std::int64_t total() const { return forward + backward; }
};

// E = B·S·H_e·4 is the whole encoder output; chunk k = rank k's sequence chunk of it. Ours: each LM rank
// receives what it lacks (E less its own chunk when it is an SP rank too; under a TP encoder, nothing when
// it is an encoder rank), each encoder rank outside the LM its part of the gradient. Public: the all-gather
// (each SP rank receives E less its chunk), then E to each LM rank not paired with itself and E back.
inline boundary_formula expected_boundary_bytes(const config& c, const std::vector<int>& enc,
                                                const std::vector<int>& lm, const step_options& so) {
  const std::int64_t e = c.batch * c.patches * c.enc_hidden * 4;
  const int n = static_cast<int>(enc.size());
  const bool tp = so.encoder == encoder_layout::tp;
  auto chunk = [&](int k) { return tp ? e : parallel::chunk_size(c.patches, n, k) * c.batch * c.enc_hidden * 4; };
  auto index_in = [](const std::vector<int>& v, int r) {
    const auto it = std::find(v.begin(), v.end(), r);
    return it == v.end() ? -1 : static_cast<int>(it - v.begin());
  };
  boundary_formula f;
  if (so.boundary == boundary_kind::ours) {
    for (int d : lm) {
      const int k = index_in(enc, d);
      f.forward += e - (k >= 0 ? chunk(k) : 0);
    }
    for (int k = 0; k < n; ++k) {
      if (index_in(lm, enc[static_cast<std::size_t>(k)]) < 0) f.backward += chunk(k);
    }
    return f;
  }
  for (int k = 0; k < n; ++k) f.forward += e - chunk(k);
  for (std::size_t k = 0; k < enc.size() && k < lm.size(); ++k) {
    if (enc[k] != lm[k]) {
      f.forward += e;
      f.backward += e;
    }
  }
  return f;
}

}  // namespace hybrid
