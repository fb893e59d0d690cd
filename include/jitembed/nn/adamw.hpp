// AdamW (decoupled weight decay, Loshchilov & Hutter) over a rank's own parameter shards, the update
// torch.optim.AdamW makes (single-tensor path, f32): p *= 1 - lr·wd; m = lerp(m, g, 1 - β1);
// v = β2·v + (1 - β2)·g²; p -= lr / (1 - β1^t) · m / (sqrt(v) / sqrt(1 - β2^t) + ε). Its state (step, m, v)
// exports as named tensors for a checkpoint and loads back for an exact resume.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::nn {

// Doubles, as PyTorch's Python floats: the scalars of an update (1 - β1, lr / (1 - β1^t), ...) are computed in
// double and rounded to f32 once, as torch does (f32 scalars gave 4e-6 relative differences after two steps;
// now at most an ulp, from torch's fused multiply-adds in its vectorized kernels).
struct adamw_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class adamw {
 public:
  // Parameters (contiguous f32 CPU tensors, distinct names), updated in place by step(). invalid_argument
  // for a parameter that is not, a duplicate name, or options out of range.
  static result<adamw> create(named_tensors params, adamw_options opt = {}) {
    if (!(opt.lr >= 0) || !(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1) || !(opt.eps >= 0) ||
        !(opt.weight_decay >= 0))
      return fail(errc::invalid_argument, "adamw: lr, eps, weight_decay must be >= 0 and betas in [0, 1)");
    adamw a;
    a.opt_ = opt;
    for (auto& [name, p] : params) {
      if (p.dtype() != dtype::f32 || !p.is_contiguous() || !p.device().is_cpu())
        return fail(errc::invalid_argument, "adamw: parameter '" + name + "' is not a contiguous f32 CPU tensor");
      if (find_tensor(a.params_, name)) return fail(errc::invalid_argument, "adamw: parameter '" + name + "' twice");
      a.m_.emplace_back(name, tensor::zeros(p.shape(), dtype::f32));
      a.v_.emplace_back(name, tensor::zeros(p.shape(), dtype::f32));
      a.params_.emplace_back(name, p);
    }
    return a;
  }

  // One update with a gradient for every parameter (same name and shape, f32 contiguous; extra names are
  // invalid_argument too: a gradient nobody applies is a bug). Nothing changes on an error.
  result<void> step(const named_tensors& grads) {
    // Each parameter's gradient, found once: by position when the names line up (the usual case: the same
    // module lists both), else through a name index, so a step is linear in the parameter count either way.
    std::unordered_map<std::string_view, const tensor*> by_name;
    std::vector<const tensor*> matched(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const std::string& name = params_[i].first;
      if (i < grads.size() && grads[i].first == name) {
        matched[i] = &grads[i].second;
        continue;
      }
      if (by_name.empty())
        for (const auto& [n, t] : grads) by_name.emplace(n, &t);
      const auto it = by_name.find(name);
      if (it == by_name.end()) return fail(errc::invalid_argument, "adamw: no gradient for parameter '" + name + "'");
      matched[i] = it->second;
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const std::string& name = params_[i].first;
      const tensor* g = matched[i];
      const tensor& p = params_[i].second;
      if (g->dtype() != dtype::f32 || !g->is_contiguous() || g->shape() != p.shape())
        return fail(errc::invalid_argument, "adamw: the gradient of '" + name + "' is not f32 contiguous of its shape");
    }
    if (grads.size() != params_.size())
      return fail(errc::invalid_argument, "adamw: " + std::to_string(grads.size()) + " gradients for " +
                                              std::to_string(params_.size()) + " parameters");
    ++step_;
    const auto& o = opt_;
    const auto t = static_cast<double>(step_);
    const auto decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
    const auto w1 = static_cast<float>(1.0 - o.beta1);
    const auto b2 = static_cast<float>(o.beta2);
    const auto w2 = static_cast<float>(1.0 - o.beta2);
    const auto step_size = static_cast<float>(o.lr / (1.0 - std::pow(o.beta1, t)));
    const auto bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t)));
    const auto eps = static_cast<float>(o.eps);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      float* p = params_[i].second.data<float>();
      float* m = m_[i].second.data<float>();
      float* v = v_[i].second.data<float>();
      const float* g = matched[i]->data<float>();
      const std::uint64_t n = params_[i].second.numel();
      for (std::uint64_t k = 0; k < n; ++k) {
        p[k] *= decay;
        m[k] += w1 * (g[k] - m[k]);  // torch's lerp for a weight below 0.5
        v[k] = v[k] * b2 + w2 * g[k] * g[k];
        const float denom = std::sqrt(v[k]) / bc2_sqrt + eps;
        p[k] += -step_size * (m[k] / denom);
      }
    }
    return {};
  }

  std::int64_t steps() const noexcept { return step_; }
  const adamw_options& options() const noexcept { return opt_; }

  // The state to checkpoint: "step" (i64 [1]), then "exp_avg/<name>" and "exp_avg_sq/<name>" per parameter
  // (copies: the optimizer goes on updating its own).
  named_tensors state() const {
    named_tensors st;
    tensor s = tensor::empty(shape{1}, dtype::i64);
    *s.data<std::int64_t>() = step_;
    st.emplace_back("step", std::move(s));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      st.emplace_back("exp_avg/" + m_[i].first, copy(m_[i].second));
      st.emplace_back("exp_avg_sq/" + v_[i].first, copy(v_[i].second));
    }
    return st;
  }
  // Loads a state() of an optimizer over the same parameter names and shapes (the parameters themselves
  // are the caller's to restore). invalid_argument naming what differs; nothing changes then.
  result<void> load_state(const named_tensors& st) {
    const tensor* s = find_tensor(st, "step");
    if (!s || s->dtype() != dtype::i64 || s->numel() != 1)
      return fail(errc::invalid_argument, "adamw state: no i64 'step'");
    for (std::size_t i = 0; i < params_.size(); ++i) {
      for (const char* prefix : {"exp_avg/", "exp_avg_sq/"}) {
        const tensor* t = find_tensor(st, prefix + params_[i].first);
        if (!t || t->dtype() != dtype::f32 || t->shape() != params_[i].second.shape())
          return fail(errc::invalid_argument, std::string("adamw state: '") + prefix + params_[i].first +
                                                  "' missing or not f32 of the parameter's shape");
      }
    }
    step_ = *s->data<std::int64_t>();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      copy_into(*find_tensor(st, "exp_avg/" + params_[i].first), m_[i].second);
      copy_into(*find_tensor(st, "exp_avg_sq/" + params_[i].first), v_[i].second);
    }
    return {};
  }

 private:
  adamw() = default;
  static tensor copy(const tensor& t) { return tensor::copy_of(t.bytes(), t.dtype(), t.shape()); }
  static void copy_into(const tensor& from, tensor& to) {
    if (to.nbytes()) std::memcpy(to.data(), from.bytes().data(), to.nbytes());
  }

  adamw_options opt_;
  named_tensors params_, m_, v_;
  std::int64_t step_ = 0;
};

}  // namespace jitembed::nn
