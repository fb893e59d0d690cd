// The vision encoder tensor parallel, as a uniform-TP layout runs it: every rank holds the whole sequence,
// its heads of q/k/v and its rows of fc1 (column parallel), its columns of out/fc2 (row parallel, one
// all_reduce each way per pair), and replicated patch embedding and LayerNorms. CPU math on the Gloo group.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "jitembed/parallel/gloo.hpp"
#include "model.hpp"

namespace hybrid {

using jitembed::parallel::gloo_communicator;

// Rows of the fused [q; k; v] weight of `prefix` ("lm", "enc") ordered so that rank r's contiguous shard
// is [q_r; k_r; v_r] (its heads), and its inverse for the gathered gradient.
inline tensor fuse_qkv_of(const tensors& p, const std::string& prefix, int tp) {
  const tensor_view parts_all[] = {p.at(prefix + ".q.w").view(), p.at(prefix + ".k.w").view(),
                                   p.at(prefix + ".v.w").view()};
  std::vector<tensor> pieces;
  for (int r = 0; r < tp; ++r) {
    for (const auto& w : parts_all) pieces.push_back(parallel::local_chunk(w, 0, tp, r));
  }
  std::vector<tensor_view> views(pieces.begin(), pieces.end());
  return parallel::concat(views, 0);
}
inline void unfuse_qkv_of(const tensor& fused, const std::string& prefix, int tp, tensors& out) {
  const std::int64_t rows = fused.size(0) / 3, per = rows / tp;
  const char* names[] = {".q.w", ".k.w", ".v.w"};
  for (int j = 0; j < 3; ++j) {
    std::vector<tensor> pieces;
    for (int r = 0; r < tp; ++r) pieces.push_back(parallel::narrow(fused.view(), 0, (3 * r + j) * per, per));
    std::vector<tensor_view> views(pieces.begin(), pieces.end());
    out[prefix + names[j]] = parallel::concat(views, 0);
  }
}

// The parameters a TP encoder rank holds (its shards) and their gradients, accumulated across microbatches;
// one per step, shared by the microbatches' tp_encoder states.
struct tp_encoder_shards {
  int tp = 1, rank = 0;
  tensors w;  // "enc.q.w" ... : this rank's shard; the replicated ones are read from the full params
  tensors g;  // gradients of the shards (the replicated ones accumulate into the step's full-shaped map)

  // Which dim of a parameter TP splits (-1: replicated on every rank).
  static int split_dim(const std::string& name) {
    for (const char* n : {"enc.q.w", "enc.k.w", "enc.v.w", "enc.fc1.w", "enc.fc1.b"}) {
      if (name == n) return 0;
    }
    if (name == "enc.o.w" || name == "enc.fc2.w") return 1;
    return -1;
  }

  tp_encoder_shards(const tensors& p, int degree, int r) : tp(degree), rank(r) {
    for (const auto& [name, t] : p) {
      const int d = split_dim(name);
      if (name.rfind("enc.", 0) != 0 || d < 0) continue;
      w[name] = parallel::local_chunk(t.view(), static_cast<std::size_t>(d), tp, rank);
      g[name] = zeros_like(w[name]);
    }
  }

  // Writes this rank's shard gradients into their slices of the full-shaped map (zeros elsewhere): summed
  // over the group they give the full gradients (the comparison's gather, after the step).
  void place_into(tensors& full) const {
    for (const auto& [name, t] : g) {
      const int d = split_dim(name);
      tensor& f = full.at(name);
      std::fill_n(f.view().data<float>(), f.numel(), 0.0f);
      parallel::copy_into(f.view(), static_cast<std::size_t>(d), parallel::chunk_offset(f.size(d), tp, rank), t.view());
    }
  }
};

// One microbatch of the TP encoder: forward(patches [rows, S, patch_dim], all of them) returns the whole
// output on every rank; backward(dx2, whole) accumulates the shard gradients into `sh` and the replicated
// ones (complete on every rank: they see replicated activations and all-reduced gradients) into g.
struct tp_encoder {
  const config& c;
  const tensors& p;
  gloo_communicator& comm;
  tp_encoder_shards& sh;
  tensor x_in, x0, q, k, v, x1, h, gh;
  ln_out a1, a2;
  attn_out at;

  // The partial sums of a row-parallel linear, completed by one all_reduce; the bias after the sum.
  tensor row_parallel(const tensor& x, const std::string& name) {
    tensor y = linear(x, sh.w.at(name + ".w"), nullptr);
    comm.all_reduce(y.view(), parallel::reduce_op::sum).value();
    const tensor& b = p.at(name + ".b");
    const auto n = static_cast<std::int64_t>(b.numel());
    float* yd = y.view().data<float>();
    const float* bd = b.view().data<float>();
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(y.numel()); ++i) yd[i] += bd[i % n];
    return y;
  }

  tensor forward(const tensor& patches) {
    const int heads_t = static_cast<int>(c.enc_heads) / sh.tp;
    x_in = patches;
    x0 = linear(x_in, p.at("enc.patch.w"), &p.at("enc.patch.b"));
    a1 = layer_norm(x0, p, "enc.ln1", c.eps);
    q = linear(a1.y, sh.w.at("enc.q.w"), nullptr);
    k = linear(a1.y, sh.w.at("enc.k.w"), nullptr);
    v = linear(a1.y, sh.w.at("enc.v.w"), nullptr);
    at = attention(q, k, v, heads_t, /*causal=*/false);
    x1 = add(x0, row_parallel(at.out, "enc.o"));
    a2 = layer_norm(x1, p, "enc.ln2", c.eps);
    h = linear(a2.y, sh.w.at("enc.fc1.w"), &sh.w.at("enc.fc1.b"));
    gh = gelu(h);
    return add(x1, row_parallel(gh, "enc.fc2"));
  }

  // dy's input gradient and this rank's weight gradient of a row-parallel linear (dy replicated: no
  // communication), the bias gradient complete into g.
  tensor row_parallel_back(const tensor& x, const tensor& dy, tensors& g, const std::string& name) {
    tensor dx = tensor::empty(x.shape(), dtype::f32);
    const tensor_view dxv = dx.view(), dw = sh.g.at(name + ".w").view(), db = g.at(name + ".b").view();
    pm::linear_backward(x.view(), sh.w.at(name + ".w").view(), dy.view(), &dxv, &dw, &db);
    return dx;
  }
  // A column-parallel linear's partial input gradient (summed by the caller's all_reduce) and its shards'.
  tensor column_parallel_back(const tensor& x, const tensor& dy, const std::string& name, bool has_bias) {
    tensor dx = tensor::empty(x.shape(), dtype::f32);
    const tensor_view dxv = dx.view(), dw = sh.g.at(name + ".w").view();
    const tensor_view db = has_bias ? sh.g.at(name + ".b").view() : tensor_view();
    pm::linear_backward(x.view(), sh.w.at(name + ".w").view(), dy.view(), &dxv, &dw, has_bias ? &db : nullptr);
    return dx;
  }

  void backward(const tensor& dx2, tensors& g) {
    const std::int64_t heads_t = c.enc_heads / sh.tp, hd = c.enc_hidden / c.enc_heads;
    tensor dgh = row_parallel_back(gh, dx2, g, "enc.fc2");
    tensor da2 = column_parallel_back(a2.y, gelu_back(h, dgh), "enc.fc1", true);
    comm.all_reduce(da2.view(), parallel::reduce_op::sum).value();
    tensor dx1 = add(dx2, layer_norm_back(x1, p, a2, da2, g, "enc.ln2"));
    tensor datt = row_parallel_back(at.out, dx1, g, "enc.o");
    tensor dq = tensor::empty(q.shape(), dtype::f32), dk = tensor::empty(k.shape(), dtype::f32),
           dv = tensor::empty(v.shape(), dtype::f32);
    const shape s4{c.batch, c.patches, heads_t, hd};
    pm::attention_backward(reshape(q, s4).view(), reshape(k, s4).view(), reshape(v, s4).view(), at.saved,
                           reshape(datt, s4).view(), reshape(dq, s4).view(), reshape(dk, s4).view(),
                           reshape(dv, s4).view());
    tensor da1 = column_parallel_back(a1.y, dq, "enc.q", false);
    pm::add_inplace(da1.view(), column_parallel_back(a1.y, dk, "enc.k", false).view());
    pm::add_inplace(da1.view(), column_parallel_back(a1.y, dv, "enc.v", false).view());
    comm.all_reduce(da1.view(), parallel::reduce_op::sum).value();
    tensor dx0 = add(dx1, layer_norm_back(x0, p, a1, da1, g, "enc.ln1"));
    (void)linear_back(x_in, p.at("enc.patch.w"), dx0, g, "enc.patch", true);
  }
};

}  // namespace hybrid
