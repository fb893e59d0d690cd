// jit_train_demo: the model trained — a small conditional denoiser. Input: the noisy latent (flattened),
// the pooled caption embedding and the noise level; output: the predicted noise; loss: mean squared error.
//   a = x·W_inᵀ + b_in → h = GELU(a) → r = h + MLP(h) → ε̂ = r·W_outᵀ + b_out
// The MLP is parallel::tensor_parallel_mlp (Megatron column → GELU → row), so `--tp 2` shards it over two
// Gloo ranks; the input and output projections are replicated. Explicit forward/backward, Adam in plain
// loops. Every rank sees the whole batch (the ranks load halves and all-gather them), so the replicated
// parameters get the same gradient on each rank and need no synchronisation.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "data.hpp"
#include "jitembed/parallel/math.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"

namespace jit_train_demo {

using namespace jitembed;
namespace math = jitembed::parallel::math;

struct denoiser_config {
  std::int64_t latent_dim = 256;  // flattened latent (image [4, 8, 8], video [4, 1, 8, 8])
  std::int64_t cond_dim = 64;     // pooled caption embedding
  std::int64_t hidden = 256;
  std::int64_t ffn = 1024;
  float lr = 2e-3f;
  std::uint64_t seed = 1;
  std::int64_t input_dim() const { return latent_dim + cond_dim + 1; }
};

// One parameter tensor with its gradient and Adam moments. `value` shares the layer's storage.
struct param {
  tensor value, grad, m, v;
};

inline tensor normal_tensor(rng& r, const shape& s, float scale) {
  tensor t = tensor::empty(s, dtype::f32);
  float* p = t.data<float>();
  for (std::uint64_t i = 0; i < t.numel(); ++i) p[i] = r.normal() * scale;
  return t;
}

template <parallel::communicator C>
class denoiser {
 public:
  // Throws jitembed::error (invalid_argument) when ffn is not divisible by the tensor-parallel degree.
  denoiser(C& comm, const denoiser_config& c)
      : c_(c), mlp_(parallel::tensor_parallel_mlp<C>::create(comm, c.hidden, c.ffn).value()) {
    // Full weights drawn identically on every rank; the TP layers keep their shards.
    rng r(mix(c.seed, 0x6d6f64656c));
    w_in_ = normal_tensor(r, shape{c.hidden, c.input_dim()}, 1.0f / std::sqrt(static_cast<float>(c.input_dim())));
    b_in_ = tensor::zeros(shape{c.hidden}, dtype::f32);
    const tensor w1 = normal_tensor(r, shape{c.ffn, c.hidden}, 1.0f / std::sqrt(static_cast<float>(c.hidden)));
    const tensor b1 = tensor::zeros(shape{c.ffn}, dtype::f32);
    const tensor w2 = normal_tensor(r, shape{c.hidden, c.ffn}, 0.5f / std::sqrt(static_cast<float>(c.ffn)));
    const tensor b2 = tensor::zeros(shape{c.hidden}, dtype::f32);
    mlp_.load_full(w1, &b1.view(), w2, &b2.view());
    w_out_ = normal_tensor(r, shape{c.latent_dim, c.hidden}, 0.5f / std::sqrt(static_cast<float>(c.hidden)));
    b_out_ = tensor::zeros(shape{c.latent_dim}, dtype::f32);
    g_w_in_ = tensor::zeros(w_in_.shape(), dtype::f32);
    g_b_in_ = tensor::zeros(b_in_.shape(), dtype::f32);
    g_w_out_ = tensor::zeros(w_out_.shape(), dtype::f32);
    g_b_out_ = tensor::zeros(b_out_.shape(), dtype::f32);
    add(w_in_, g_w_in_);
    add(b_in_, g_b_in_);
    add(mlp_.fc1().weight(), mlp_.fc1().grad_weight());
    add(mlp_.fc1().bias(), mlp_.fc1().grad_bias());
    add(mlp_.fc2().weight(), mlp_.fc2().grad_weight());
    add(mlp_.fc2().bias(), mlp_.fc2().grad_bias());
    add(w_out_, g_w_out_);
    add(b_out_, g_b_out_);
  }

  // One training step on the whole batch x [B, input_dim], target noise eps [B, latent_dim] (identical on
  // every rank). Returns the sum of squared errors over the batch (loss = sum / (B · latent_dim)).
  double step(const tensor& x, const tensor& eps) {
    const std::int64_t B = x.size(0), L = c_.latent_dim;
    tensor a = tensor::empty(shape{B, c_.hidden}, dtype::f32);
    math::linear_forward(x, w_in_, &b_in_.view(), a);
    tensor h = tensor::empty(a.shape(), dtype::f32);
    math::gelu_forward(a, h);
    tensor r = mlp_.forward(h).value();
    math::add_inplace(r, h);
    tensor out = tensor::empty(shape{B, L}, dtype::f32);
    math::linear_forward(r, w_out_, &b_out_.view(), out);

    // MSE and its gradient.
    double sse = 0;
    float* o = out.data<float>();
    const float* e = eps.data<const float>();
    const float scale = 2.0f / static_cast<float>(B * L);
    for (std::int64_t i = 0; i < B * L; ++i) {
      const float d = o[i] - e[i];
      sse += static_cast<double>(d) * d;
      o[i] = d * scale;  // now d loss / d out
    }

    zero_grad();
    tensor dr = tensor::empty(r.shape(), dtype::f32);
    const tensor_view drv = dr.view(), gwo = g_w_out_.view(), gbo = g_b_out_.view();
    math::linear_backward(r, w_out_, out, &drv, &gwo, &gbo);
    tensor dh = mlp_.backward(dr).value();
    math::add_inplace(dh, dr);  // the residual
    math::gelu_backward(a, dh, dh);
    const tensor_view gwi = g_w_in_.view(), gbi = g_b_in_.view();
    math::linear_backward(x, w_in_, dh, nullptr, &gwi, &gbi);
    adam();
    return sse;
  }

  std::size_t parameter_count() const {
    std::size_t n = 0;
    for (const auto& p : params_) n += p.value.numel();
    return n;
  }

 private:
  void add(const tensor& value, const tensor& grad) {
    params_.push_back({value, grad, tensor::zeros(value.shape(), dtype::f32), tensor::zeros(value.shape(), dtype::f32)});
  }

  void zero_grad() {
    mlp_.zero_grad();
    for (const tensor* g : {&g_w_in_, &g_b_in_, &g_w_out_, &g_b_out_}) std::memset(g->data(), 0, g->nbytes());
  }

  void adam() {
    constexpr float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    ++t_;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t_)), c2 = 1.0f - std::pow(b2, static_cast<float>(t_));
    for (auto& p : params_) {
      float* w = p.value.data<float>();
      const float* g = p.grad.data<const float>();
      float* m = p.m.data<float>();
      float* v = p.v.data<float>();
      for (std::uint64_t i = 0; i < p.value.numel(); ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= c_.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    }
  }

  denoiser_config c_;
  parallel::tensor_parallel_mlp<C> mlp_;
  tensor w_in_, b_in_, w_out_, b_out_;
  tensor g_w_in_, g_b_in_, g_w_out_, g_b_out_;
  std::vector<param> params_;
  std::int64_t t_ = 0;
};

// The rows of this rank's part of the batch, gathered from every rank in rank order: local [b_r, K] →
// [Σ b_r, K] on every rank (one all_gather of the counts, one all_gather_v of the rows).
template <parallel::communicator C>
tensor gather_rows(C& comm, const tensor& local) {
  if (comm.size() == 1) return local;
  const std::int64_t K = local.size(1);
  tensor mine = tensor::empty(shape{1}, dtype::i64), counts = tensor::empty(shape{comm.size()}, dtype::i64);
  mine.data<std::int64_t>()[0] = local.size(0);
  comm.all_gather(mine, counts).value();
  std::vector<std::int64_t> elems(static_cast<std::size_t>(comm.size()));
  std::int64_t rows = 0;
  for (int r = 0; r < comm.size(); ++r) {
    rows += counts.data<std::int64_t>()[r];
    elems[static_cast<std::size_t>(r)] = counts.data<std::int64_t>()[r] * K;
  }
  tensor full = tensor::empty(shape{rows, K}, dtype::f32);
  comm.all_gather_v(local, full, elems).value();
  return full;
}

}  // namespace jit_train_demo
