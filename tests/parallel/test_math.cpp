// jitembed/nn (the reference math): GEMM vs a naive loop, every backward vs central finite differences and naive double
// references, the causal mask, and the errors misuse raises.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "jitembed/nn.hpp"
#include "jitembed/nn/detail/attention_reference.hpp"
#include "jitembed/parallel/math.hpp"  // the compatibility alias parallel::math

namespace {

using jitembed::dtype;
using jitembed::errc;
using jitembed::shape;
using jitembed::tensor;
using jitembed::tensor_view;
namespace pm = jitembed::nn;

// The old spelling names the same functions.
static_assert(&jitembed::parallel::math::gemm == &jitembed::nn::gemm);

tensor random_tensor(const shape& s, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  tensor t = tensor::empty(s, dtype::f32);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (std::uint64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

tensor filled(const shape& s, float v) {
  tensor t = tensor::empty(s, dtype::f32);
  std::fill(t.data<float>(), t.data<float>() + t.numel(), v);
  return t;
}

tensor ids_tensor(const shape& s, std::vector<std::int64_t> v) {
  tensor t = tensor::empty(s, dtype::i64);
  REQUIRE(t.numel() == v.size());
  std::copy(v.begin(), v.end(), t.data<std::int64_t>());
  return t;
}

// max|a − b| / max(max|b|, 1e-6)
double rel_err(const float* a, const double* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / std::max(den, 1e-6);
}
double rel_err(const tensor& a, const std::vector<double>& b) {
  REQUIRE(a.numel() == b.size());
  return rel_err(a.data<const float>(), b.data(), b.size());
}

// Σ out ⊙ r in double: the scalar whose gradient w.r.t. out is r.
double dot(const tensor& out, const tensor& r) {
  double s = 0;
  for (std::uint64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.data<float>()[i]) * r.data<float>()[i];
  return s;
}

// Central differences of `loss` w.r.t. every element of x (eps 1e-3), compared to `analytic` (f32).
double fd_rel_err(const tensor& x, const std::function<double()>& loss, const tensor& analytic, float eps = 1e-3f) {
  std::vector<double> fd(x.numel());
  float* p = x.data<float>();
  for (std::size_t i = 0; i < fd.size(); ++i) {
    const float keep = p[i];
    p[i] = keep + eps;
    const double up = loss();
    p[i] = keep - eps;
    const double down = loss();
    p[i] = keep;
    fd[i] = (up - down) / (2.0 * static_cast<double>(eps));
  }
  return rel_err(analytic, fd);
}

template <class F>
errc code_of(F&& f) {
  try {
    f();
  } catch (const jitembed::error& e) {
    return e.code();
  }
  return errc::ok;
}

// Naive double attention for one (b, h): returns out [B, Sq, H, D].
std::vector<double> naive_attention(const tensor& q, const tensor& k, const tensor& v, bool causal) {
  const auto B = q.size(0), Sq = q.size(1), H = q.size(2), D = q.size(3), Sk = k.size(1);
  std::vector<double> out(q.numel(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto at = [&](const tensor& t, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    const auto S = t.size(1);
    return static_cast<double>(t.data<float>()[((b * S + s) * H + h) * D + d]);
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Sq; ++i) {
        std::vector<double> sc(Sk, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < Sk; ++j) {
          if (causal && j > i) continue;
          double s = 0;
          for (std::int64_t d = 0; d < D; ++d) s += at(q, b, i, h, d) * at(k, b, j, h, d);
          sc[j] = s * scale;
          mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (auto& s : sc) z += (s = std::exp(s - mx));
        for (std::int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < Sk; ++j) o += sc[j] / z * at(v, b, j, h, d);
          out[((b * Sq + i) * H + h) * D + d] = o;
        }
      }
  return out;
}

// Naive double log Σ_visible exp(q·kᵀ/√D) per row: [B, H, Sq].
std::vector<double> naive_lse(const tensor& q, const tensor& k, bool causal) {
  const auto B = q.size(0), Sq = q.size(1), H = q.size(2), D = q.size(3), Sk = k.size(1);
  std::vector<double> lse(static_cast<std::size_t>(B * H * Sq));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Sq; ++i) {
        std::vector<double> sc;
        for (std::int64_t j = 0; j < Sk && !(causal && j > i); ++j) {
          double s = 0;
          for (std::int64_t d = 0; d < D; ++d)
            s += static_cast<double>(q.data<float>()[((b * Sq + i) * H + h) * D + d]) * k.data<float>()[((b * Sk + j) * H + h) * D + d];
          sc.push_back(s * scale);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double s : sc) z += std::exp(s - mx);
        lse[static_cast<std::size_t>((b * H + h) * Sq + i)] = mx + std::log(z);
      }
  return lse;
}

}  // namespace

TEST_CASE("math: gemm equals a naive triple loop for every transpose combination, alpha and beta") {
  std::mt19937 rng(1);
  const std::int64_t M = 5, N = 7, K = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{-2.0f, 0.25f}}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(alpha);
        CAPTURE(beta);
        tensor a = random_tensor(ta ? shape{K, M} : shape{M, K}, rng);
        tensor b = random_tensor(tb ? shape{N, K} : shape{K, N}, rng);
        tensor c = random_tensor(shape{M, N}, rng);
        std::vector<double> want(M * N);
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (std::int64_t k = 0; k < K; ++k) {
              const double av = ta ? a.data<float>()[k * M + i] : a.data<float>()[i * K + k];
              const double bv = tb ? b.data<float>()[j * K + k] : b.data<float>()[k * N + j];
              s += av * bv;
            }
            want[i * N + j] = alpha * s + beta * static_cast<double>(c.data<float>()[i * N + j]);
          }
        pm::gemm(ta, tb, alpha, a, b, beta, c);
        CHECK(rel_err(c, want) <= 1e-6);
      }
}

TEST_CASE("math: gemm with beta 0 overwrites NaN, K = 0 scales C, empty M is a no-op") {
  std::mt19937 rng(2);
  tensor a = random_tensor(shape{4, 6}, rng), b = random_tensor(shape{6, 3}, rng);
  tensor c = filled(shape{4, 3}, std::numeric_limits<float>::quiet_NaN());
  pm::gemm(false, false, 1.0f, a, b, 0.0f, c);
  for (std::uint64_t i = 0; i < c.numel(); ++i) CHECK(std::isfinite(c.data<float>()[i]));

  tensor a0 = tensor::empty(shape{4, 0}, dtype::f32), b0 = tensor::empty(shape{0, 3}, dtype::f32);
  tensor c2 = filled(shape{4, 3}, 2.0f);
  pm::gemm(false, false, 1.0f, a0, b0, 0.5f, c2);
  for (std::uint64_t i = 0; i < c2.numel(); ++i) CHECK(c2.data<float>()[i] == 1.0f);
  pm::gemm(false, false, 1.0f, a0, b0, 0.0f, c2);
  for (std::uint64_t i = 0; i < c2.numel(); ++i) CHECK(c2.data<float>()[i] == 0.0f);

  tensor e = tensor::empty(shape{0, 6}, dtype::f32), ce = tensor::empty(shape{0, 3}, dtype::f32);
  pm::gemm(false, false, 1.0f, e, b, 0.0f, ce);  // nothing to do, must not throw
}

TEST_CASE("math: gemm and as_matrix reject bad shapes, dtypes and layouts") {
  tensor a = filled(shape{2, 3}, 1.0f), b = filled(shape{4, 5}, 1.0f), c = filled(shape{2, 5}, 0.0f);
  CHECK(code_of([&] { pm::gemm(false, false, 1.0f, a, b, 0.0f, c); }) == errc::invalid_argument);
  try {
    pm::gemm(false, false, 1.0f, a, b, 0.0f, c);
  } catch (const jitembed::error& e) {
    CHECK(e.message().find("gemm:") == 0);
    CHECK(e.message().find("[2,3]") != std::string::npos);
  }
  tensor bi = tensor::zeros(shape{3, 5}, dtype::i32);
  CHECK(code_of([&] { pm::gemm(false, false, 1.0f, a, bi, 0.0f, c); }) == errc::dtype_mismatch);
  tensor a3 = filled(shape{1, 2, 3}, 1.0f);
  CHECK(code_of([&] { pm::gemm(false, false, 1.0f, a3, filled(shape{3, 5}, 1.0f), 0.0f, c); }) == errc::invalid_argument);
  // a transposed (non-contiguous) view
  tensor_view at(a.data(), dtype::f32, shape{3, 2}, shape{1, 3}, jitembed::device::cpu());
  CHECK(code_of([&] { pm::gemm(false, false, 1.0f, at, filled(shape{2, 5}, 1.0f), 0.0f, filled(shape{3, 5}, 0.0f)); }) ==
        errc::invalid_argument);
  tensor_view cuda_view(a.data(), dtype::f32, shape{2, 3}, jitembed::device::cuda(0));
  CHECK(code_of([&] { pm::gemm(false, false, 1.0f, cuda_view, filled(shape{3, 5}, 1.0f), 0.0f, c); }) == errc::invalid_argument);

  tensor x = filled(shape{2, 3, 4}, 1.0f);
  const tensor_view m = pm::as_matrix(x);
  CHECK(m.shape() == shape{6, 4});
  CHECK(m.data() == x.data());
  CHECK(pm::as_matrix(filled(shape{4}, 1.0f)).shape() == shape{1, 4});
  CHECK(code_of([&] { (void)pm::as_matrix(at); }) == errc::invalid_argument);
}

TEST_CASE("math: gemm is correct when several threads call it at once") {
  std::mt19937 rng(3);
  tensor a = random_tensor(shape{64, 48}, rng), b = random_tensor(shape{48, 80}, rng);
  tensor ref = tensor::empty(shape{64, 80}, dtype::f32);
  pm::gemm(false, false, 1.0f, a, b, 0.0f, ref);
  std::vector<tensor> outs;
  for (int t = 0; t < 4; ++t) outs.push_back(tensor::empty(shape{64, 80}, dtype::f32));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int it = 0; it < 20; ++it) pm::gemm(false, false, 1.0f, a, b, 0.0f, outs[t]);
    });
  for (auto& th : threads) th.join();
  for (auto& o : outs) CHECK(std::equal(o.data<float>(), o.data<float>() + o.numel(), ref.data<float>()));
}

TEST_CASE("math: linear forward and backward vs naive double and finite differences") {
  std::mt19937 rng(4);
  const std::int64_t B = 2, S = 3, K = 5, N = 4;
  tensor x = random_tensor(shape{B, S, K}, rng), w = random_tensor(shape{N, K}, rng), bias = random_tensor(shape{N}, rng);
  tensor y = tensor::empty(shape{B, S, N}, dtype::f32);
  for (bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    const tensor_view bv = bias;
    pm::linear_forward(x, w, with_bias ? &bv : nullptr, y);
    std::vector<double> want(B * S * N);
    for (std::int64_t i = 0; i < B * S; ++i)
      for (std::int64_t n = 0; n < N; ++n) {
        double s = with_bias ? bias.data<float>()[n] : 0.0;
        for (std::int64_t k = 0; k < K; ++k) s += static_cast<double>(x.data<float>()[i * K + k]) * w.data<float>()[n * K + k];
        want[i * N + n] = s;
      }
    CHECK(rel_err(y, want) <= 1e-6);
  }

  tensor r = random_tensor(shape{B, S, N}, rng);  // dy
  const tensor_view bv = bias;
  auto loss = [&] {
    pm::linear_forward(x, w, &bv, y);
    return dot(y, r);
  };
  tensor dx = filled(shape{B, S, K}, 99.0f);  // overwritten
  tensor dw = filled(shape{N, K}, 0.5f), db = filled(shape{N}, -0.25f);  // accumulated
  const tensor_view dxv = dx, dwv = dw, dbv = db;
  pm::linear_backward(x, w, r, &dxv, &dwv, &dbv);
  // naive double references
  std::vector<double> dx_ref(B * S * K, 0.0), dw_ref(N * K, 0.5), db_ref(N, -0.25);
  for (std::int64_t i = 0; i < B * S; ++i)
    for (std::int64_t n = 0; n < N; ++n) {
      const double g = r.data<float>()[i * N + n];
      db_ref[n] += g;
      for (std::int64_t k = 0; k < K; ++k) {
        dx_ref[i * K + k] += g * w.data<float>()[n * K + k];
        dw_ref[n * K + k] += g * x.data<float>()[i * K + k];
      }
    }
  CHECK(rel_err(dx, dx_ref) <= 1e-6);
  CHECK(rel_err(dw, dw_ref) <= 1e-6);
  CHECK(rel_err(db, db_ref) <= 1e-6);
  // finite differences (fresh, non-accumulated gradients)
  tensor dw0 = filled(shape{N, K}, 0.0f), db0 = filled(shape{N}, 0.0f);
  const tensor_view dw0v = dw0, db0v = db0;
  pm::linear_backward(x, w, r, nullptr, &dw0v, &db0v);
  CHECK(fd_rel_err(x, loss, dx) <= 1e-2);
  CHECK(fd_rel_err(w, loss, dw0) <= 1e-2);
  CHECK(fd_rel_err(bias, loss, db0) <= 1e-2);

  // errors
  CHECK(code_of([&] { pm::linear_forward(x, filled(shape{N, K + 1}, 0.0f), nullptr, y); }) == errc::invalid_argument);
  CHECK(code_of([&] { pm::linear_forward(x, w, nullptr, filled(shape{B, S, N + 1}, 0.0f)); }) == errc::invalid_argument);
  const tensor_view bad_bias = filled(shape{N + 1}, 0.0f);
  CHECK(code_of([&] { pm::linear_forward(x, w, &bad_bias, y); }) == errc::invalid_argument);
  CHECK(code_of([&] { pm::linear_backward(x, w, filled(shape{B, S, N + 2}, 0.0f), &dxv, nullptr, nullptr); }) ==
        errc::invalid_argument);
  const tensor_view dw_i = tensor::zeros(shape{N, K}, dtype::f64);
  CHECK(code_of([&] { pm::linear_backward(x, w, r, nullptr, &dw_i, nullptr); }) == errc::dtype_mismatch);
}

TEST_CASE("math: gelu forward matches the tanh formula, backward matches finite differences") {
  std::mt19937 rng(5);
  tensor x = random_tensor(shape{3, 7}, rng, -4.0f, 4.0f);
  tensor y = tensor::empty(shape{3, 7}, dtype::f32);
  pm::gelu_forward(x, y);
  std::vector<double> want(x.numel());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double v = x.data<float>()[i];
    want[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  CHECK(rel_err(y, want) <= 1e-6);
  // gelu(0) = 0, gelu(large) ≈ x, gelu(-large) ≈ 0
  tensor s = tensor::empty(shape{3}, dtype::f32);
  s.data<float>()[0] = 0.0f;
  s.data<float>()[1] = 10.0f;
  s.data<float>()[2] = -10.0f;
  pm::gelu_forward(s, s);
  CHECK(s.data<float>()[0] == 0.0f);
  CHECK(s.data<float>()[1] == doctest::Approx(10.0f));
  CHECK(std::abs(s.data<float>()[2]) < 1e-6f);

  tensor r = random_tensor(shape{3, 7}, rng);
  tensor dx = tensor::empty(shape{3, 7}, dtype::f32);
  pm::gelu_backward(x, r, dx);
  CHECK(fd_rel_err(x, [&] { pm::gelu_forward(x, y); return dot(y, r); }, dx) <= 1e-2);
  // exact derivative in double
  std::vector<double> dref(x.numel());
  for (std::size_t i = 0; i < dref.size(); ++i) {
    const double v = x.data<float>()[i], c = std::sqrt(2.0 / M_PI);
    const double t = std::tanh(c * (v + 0.044715 * v * v * v));
    dref[i] = r.data<float>()[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v));
  }
  CHECK(rel_err(dx, dref) <= 1e-5);
  CHECK(code_of([&] { pm::gelu_forward(x, tensor::empty(shape{7, 3}, dtype::f32)); }) == errc::invalid_argument);
  CHECK(code_of([&] { pm::gelu_backward(x, r, tensor::empty(shape{3, 7}, dtype::f64)); }) == errc::dtype_mismatch);
}

TEST_CASE("math: layer_norm forward vs naive double, backward vs finite differences and naive double") {
  std::mt19937 rng(6);
  const std::int64_t B = 2, S = 3, H = 6;
  const float eps = 1e-5f;
  tensor x = random_tensor(shape{B, S, H}, rng, -2.0f, 2.0f);
  tensor gamma = random_tensor(shape{H}, rng, 0.5f, 1.5f), beta = random_tensor(shape{H}, rng);
  tensor y = tensor::empty(shape{B, S, H}, dtype::f32);
  auto saved = pm::layer_norm_forward(x, gamma, beta, eps, y);
  CHECK(saved.mean.shape() == shape{B * S});
  CHECK(saved.rstd.shape() == shape{B * S});
  std::vector<double> want(x.numel()), xhat(x.numel()), rstd(B * S);
  for (std::int64_t i = 0; i < B * S; ++i) {
    const float* row = x.data<float>() + i * H;
    double mu = 0, var = 0;
    for (std::int64_t j = 0; j < H; ++j) mu += row[j];
    mu /= H;
    for (std::int64_t j = 0; j < H; ++j) var += (row[j] - mu) * (row[j] - mu);
    var /= H;  // biased
    rstd[i] = 1.0 / std::sqrt(var + eps);
    CHECK(saved.mean.data<float>()[i] == doctest::Approx(mu).epsilon(1e-6));
    CHECK(saved.rstd.data<float>()[i] == doctest::Approx(rstd[i]).epsilon(1e-6));
    for (std::int64_t j = 0; j < H; ++j) {
      xhat[i * H + j] = (row[j] - mu) * rstd[i];
      want[i * H + j] = xhat[i * H + j] * gamma.data<float>()[j] + beta.data<float>()[j];
    }
  }
  CHECK(rel_err(y, want) <= 1e-5);

  tensor r = random_tensor(shape{B, S, H}, rng);
  tensor dx = tensor::empty(shape{B, S, H}, dtype::f32);
  tensor dg = filled(shape{H}, 1.0f), db = filled(shape{H}, 2.0f);
  const tensor_view dgv = dg, dbv = db;
  pm::layer_norm_backward(x, gamma, saved, r, dx, &dgv, &dbv);
  // naive double: dx = rstd (g − mean g − x̂ mean(g x̂)), dgamma = 1 + Σ r x̂, dbeta = 2 + Σ r
  std::vector<double> dx_ref(x.numel()), dg_ref(H, 1.0), db_ref(H, 2.0);
  for (std::int64_t i = 0; i < B * S; ++i) {
    double mg = 0, mgx = 0;
    for (std::int64_t j = 0; j < H; ++j) {
      const double g = static_cast<double>(r.data<float>()[i * H + j]) * gamma.data<float>()[j];
      mg += g / H;
      mgx += g * xhat[i * H + j] / H;
      dg_ref[j] += r.data<float>()[i * H + j] * xhat[i * H + j];
      db_ref[j] += r.data<float>()[i * H + j];
    }
    for (std::int64_t j = 0; j < H; ++j) {
      const double g = static_cast<double>(r.data<float>()[i * H + j]) * gamma.data<float>()[j];
      dx_ref[i * H + j] = rstd[i] * (g - mg - xhat[i * H + j] * mgx);
    }
  }
  CHECK(rel_err(dx, dx_ref) <= 1e-5);
  CHECK(rel_err(dg, dg_ref) <= 1e-5);
  CHECK(rel_err(db, db_ref) <= 1e-5);

  auto loss = [&] {
    (void)pm::layer_norm_forward(x, gamma, beta, eps, y);
    return dot(y, r);
  };
  tensor dg0 = filled(shape{H}, 0.0f), db0 = filled(shape{H}, 0.0f);
  const tensor_view dg0v = dg0, db0v = db0;
  pm::layer_norm_backward(x, gamma, saved, r, dx, &dg0v, &db0v);
  CHECK(fd_rel_err(x, loss, dx) <= 1e-2);
  CHECK(fd_rel_err(gamma, loss, dg0) <= 1e-2);
  CHECK(fd_rel_err(beta, loss, db0) <= 1e-2);

  CHECK(code_of([&] { (void)pm::layer_norm_forward(x, filled(shape{H + 1}, 1.0f), beta, eps, y); }) == errc::invalid_argument);
  pm::layer_norm_saved wrong{filled(shape{B * S + 1}, 0.0f), filled(shape{B * S + 1}, 1.0f)};
  CHECK(code_of([&] { pm::layer_norm_backward(x, gamma, wrong, r, dx, nullptr, nullptr); }) == errc::invalid_argument);
}

TEST_CASE("math: attention forward vs naive double (causal, non-causal, Sq != Sk)") {
  std::mt19937 rng(7);
  struct cfg {
    std::int64_t b, sq, sk, h, d;
    bool causal;
  };
  for (const cfg c : {cfg{2, 5, 5, 3, 4, false}, cfg{2, 5, 5, 3, 4, true}, cfg{1, 3, 6, 2, 8, false}, cfg{1, 6, 4, 2, 3, true}}) {
    CAPTURE(c.sq);
    CAPTURE(c.sk);
    CAPTURE(c.causal);
    tensor q = random_tensor(shape{c.b, c.sq, c.h, c.d}, rng, -2.0f, 2.0f);
    tensor k = random_tensor(shape{c.b, c.sk, c.h, c.d}, rng, -2.0f, 2.0f);
    tensor v = random_tensor(shape{c.b, c.sk, c.h, c.d}, rng);
    tensor out = tensor::empty(q.shape(), dtype::f32);
    auto saved = pm::attention_forward(q, k, v, c.causal, out);
    CHECK(saved.lse.shape() == shape{c.b, c.h, c.sq});
    CHECK(rel_err(out, naive_attention(q, k, v, c.causal)) <= 1e-5);
    CHECK(rel_err(saved.lse, naive_lse(q, k, c.causal)) <= 1e-5);
    CHECK(std::equal(out.data<float>(), out.data<float>() + out.numel(), saved.out.data<float>()));  // a copy
    CHECK(saved.causal == c.causal);
    // the reference's rows of P sum to 1; masked entries are exactly 0
    tensor ref_out = tensor::empty(q.shape(), dtype::f32);
    const tensor probs = pm::detail::attention_reference_forward(q, k, v, c.causal, ref_out);
    CHECK(rel_err(ref_out, naive_attention(q, k, v, c.causal)) <= 1e-5);
    for (std::int64_t row = 0; row < c.b * c.h * c.sq; ++row) {
      const float* p = probs.data<float>() + row * c.sk;
      double s = 0;
      for (std::int64_t j = 0; j < c.sk; ++j) {
        s += p[j];
        if (c.causal && j > row % c.sq) CHECK(p[j] == 0.0f);
      }
      CHECK(s == doctest::Approx(1.0).epsilon(1e-5));
    }
  }
}

TEST_CASE("math: attention softmax is stable for large scores") {
  std::mt19937 rng(12);
  tensor q = random_tensor(shape{1, 4, 1, 4}, rng, -20.0f, 20.0f), k = random_tensor(shape{1, 4, 1, 4}, rng, -20.0f, 20.0f);
  tensor v = random_tensor(shape{1, 4, 1, 4}, rng);
  tensor out = tensor::empty(q.shape(), dtype::f32);
  for (bool causal : {false, true}) {
    (void)pm::attention_forward(q, k, v, causal, out);
    for (std::uint64_t i = 0; i < out.numel(); ++i) REQUIRE(std::isfinite(out.data<float>()[i]));
    CHECK(rel_err(out, naive_attention(q, k, v, causal)) <= 1e-5);
  }
}

TEST_CASE("math: the causal mask really masks: a future key or value does not change earlier outputs") {
  std::mt19937 rng(8);
  const std::int64_t B = 1, S = 6, H = 2, D = 4;
  tensor q = random_tensor(shape{B, S, H, D}, rng), k = random_tensor(shape{B, S, H, D}, rng), v = random_tensor(shape{B, S, H, D}, rng);
  tensor out1 = tensor::empty(q.shape(), dtype::f32), out2 = tensor::empty(q.shape(), dtype::f32);
  (void)pm::attention_forward(q, k, v, true, out1);
  const std::int64_t t = 4;  // change key and value at position 4
  for (std::int64_t i = 0; i < H * D; ++i) {
    k.data<float>()[t * H * D + i] += 3.0f;
    v.data<float>()[t * H * D + i] -= 5.0f;
  }
  (void)pm::attention_forward(q, k, v, true, out2);
  const std::int64_t row = H * D;
  CHECK(std::equal(out1.data<float>(), out1.data<float>() + t * row, out2.data<float>()));  // positions < 4 identical
  bool later_changed = false;
  for (std::int64_t i = t * row; i < S * row; ++i) later_changed |= out1.data<float>()[i] != out2.data<float>()[i];
  CHECK(later_changed);
  // and without the mask, earlier positions do change
  tensor out3 = tensor::empty(q.shape(), dtype::f32);
  (void)pm::attention_forward(q, k, v, false, out3);
  (void)pm::attention_forward(q, k, v, true, out2);
  CHECK_FALSE(std::equal(out3.data<float>(), out3.data<float>() + row, out2.data<float>()));
}

TEST_CASE("math: attention backward vs finite differences") {
  std::mt19937 rng(9);
  struct cfg {
    std::int64_t sq, sk;
    bool causal;
  };
  for (const cfg c : {cfg{4, 4, false}, cfg{4, 4, true}, cfg{3, 5, false}}) {
    CAPTURE(c.causal);
    CAPTURE(c.sk);
    const std::int64_t B = 2, H = 2, D = 3;
    tensor q = random_tensor(shape{B, c.sq, H, D}, rng), k = random_tensor(shape{B, c.sk, H, D}, rng);
    tensor v = random_tensor(shape{B, c.sk, H, D}, rng), r = random_tensor(shape{B, c.sq, H, D}, rng);
    tensor out = tensor::empty(q.shape(), dtype::f32);
    auto saved = pm::attention_forward(q, k, v, c.causal, out);
    tensor dq = filled(q.shape(), 7.0f), dk = filled(k.shape(), 7.0f), dv = filled(v.shape(), 7.0f);  // overwritten
    pm::attention_backward(q, k, v, saved, r, dq, dk, dv);
    auto loss = [&] {
      (void)pm::attention_forward(q, k, v, c.causal, out);
      return dot(out, r);
    };
    CHECK(fd_rel_err(q, loss, dq) <= 1e-2);
    CHECK(fd_rel_err(k, loss, dk) <= 1e-2);
    CHECK(fd_rel_err(v, loss, dv) <= 1e-2);
    if (c.causal) {  // only the last query sees the last key: dV[last] = P[last, last] · dO[last]
      const std::int64_t last = c.sk - 1;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          double sc = 0;  // P[last, last] = exp(q·k/√D − lse)
          for (std::int64_t d = 0; d < D; ++d)
            sc += static_cast<double>(q.data<float>()[((b * c.sq + last) * H + h) * D + d]) * k.data<float>()[((b * c.sk + last) * H + h) * D + d];
          const auto p = static_cast<float>(std::exp(sc / std::sqrt(static_cast<double>(D)) - saved.lse.data<float>()[(b * H + h) * c.sq + last]));
          for (std::int64_t d = 0; d < D; ++d) {
            const std::int64_t at = ((b * c.sk + last) * H + h) * D + d;
            CHECK(dv.data<float>()[at] == doctest::Approx(p * r.data<float>()[at]).epsilon(1e-6));
          }
        }
    }
  }
}

TEST_CASE("math: attention rejects mismatched shapes") {
  tensor q = filled(shape{1, 4, 2, 3}, 0.0f), k = filled(shape{1, 4, 2, 3}, 0.0f), out = filled(shape{1, 4, 2, 3}, 0.0f);
  CHECK(code_of([&] { (void)pm::attention_forward(q, k, filled(shape{1, 5, 2, 3}, 0.0f), false, out); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::attention_forward(q, filled(shape{1, 4, 3, 3}, 0.0f), filled(shape{1, 4, 3, 3}, 0.0f), false, out); }) ==
        errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::attention_forward(q, k, k, false, filled(shape{1, 4, 2, 4}, 0.0f)); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::attention_forward(filled(shape{4, 2, 3}, 0.0f), k, k, false, out); }) == errc::invalid_argument);
  auto saved = pm::attention_forward(q, k, k, false, out);
  pm::attention_saved wrong{filled(shape{1, 2, 4, 5}, 0.0f), saved.out};  // the S² probabilities' shape
  CHECK(code_of([&] { pm::attention_backward(q, k, k, wrong, out, q, k, k); }) == errc::invalid_argument);
  pm::attention_saved wrong_out{saved.lse, filled(shape{1, 4, 2, 4}, 0.0f)};
  CHECK(code_of([&] { pm::attention_backward(q, k, k, wrong_out, out, q, k, k); }) == errc::invalid_argument);
  pm::attention_saved wrong_delta{saved.lse, tensor(), false, filled(shape{1, 4, 2}, 0.0f)};  // [B, S, H, 1] wanted
  CHECK(code_of([&] { pm::attention_backward(q, k, k, wrong_delta, out, q, k, k); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::attention_delta(out, filled(shape{1, 4, 2, 4}, 0.0f)); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::attention_forward(q, k, k, false, out, {.block_q = 0}); }) == errc::invalid_argument);
  CHECK(code_of([&] { pm::attention_backward(q, k, k, saved, out, q, k, k, {.block_k = -1}); }) == errc::invalid_argument);
  tensor dq = filled(q.shape(), 0.0f), dk = filled(k.shape(), 0.0f), dv = filled(k.shape(), 0.0f);
  pm::attention_backward(q, k, k, saved, out, dq, dk, dv);  // well-formed call does not throw
}

TEST_CASE("math: blockwise attention equals the exact reference (forward, dq, dk, dv, uneven blocks, Sq != Sk, O recomputed or δ given)") {
  std::mt19937 rng(13);
  struct cfg {
    std::int64_t b, sq, sk, h, d;
    bool causal;
    std::int64_t bq, bk;
    float amp;  // range of q and k: large scores exercise the running max's rescaling
  };
  const auto as_double = [](const tensor& t) { return std::vector<double>(t.data<float>(), t.data<float>() + t.numel()); };
  for (const cfg c : {cfg{2, 37, 37, 3, 8, true, 8, 16, 1}, cfg{2, 37, 37, 3, 8, false, 5, 7, 1},
                      cfg{1, 5, 5, 2, 4, true, 128, 128, 1},    // S smaller than a block
                      cfg{1, 20, 33, 2, 5, true, 6, 9, 1},      // Sq < Sk, causal: the last keys seen by nobody
                      cfg{1, 33, 20, 2, 5, true, 9, 6, 1},      // Sq > Sk, causal: the last queries see every key
                      cfg{2, 19, 26, 1, 16, false, 4, 64, 1}, cfg{1, 64, 64, 2, 3, true, 64, 64, 1},
                      cfg{1, 130, 130, 1, 64, true, 128, 128, 1},  // the default blocks, a remainder of 2
                      cfg{1, 7, 7, 1, 1, true, 1, 1, 1}, cfg{1, 24, 24, 2, 4, true, 3, 5, 20},
                      cfg{1, 24, 24, 2, 4, false, 5, 3, 20}}) {
    CAPTURE(c.sq);
    CAPTURE(c.sk);
    CAPTURE(c.d);
    CAPTURE(c.causal);
    CAPTURE(c.bq);
    CAPTURE(c.bk);
    tensor q = random_tensor(shape{c.b, c.sq, c.h, c.d}, rng, -c.amp, c.amp);
    tensor k = random_tensor(shape{c.b, c.sk, c.h, c.d}, rng, -c.amp, c.amp);
    tensor v = random_tensor(shape{c.b, c.sk, c.h, c.d}, rng), go = random_tensor(q.shape(), rng);
    tensor out = tensor::empty(q.shape(), dtype::f32), ref = tensor::empty(q.shape(), dtype::f32);
    const pm::attention_options opt{.block_q = c.bq, .block_k = c.bk};
    const auto saved = pm::attention_forward(q, k, v, c.causal, out, opt);
    const tensor probs = pm::detail::attention_reference_forward(q, k, v, c.causal, ref);
    CHECK(rel_err(out, as_double(ref)) <= 1e-5);
    tensor dq = filled(q.shape(), 7.0f), dk = filled(k.shape(), 7.0f), dv = filled(v.shape(), 7.0f);  // overwritten
    tensor rq = tensor::empty(q.shape(), dtype::f32), rk = tensor::empty(k.shape(), dtype::f32), rv = tensor::empty(v.shape(), dtype::f32);
    pm::attention_backward(q, k, v, saved, go, dq, dk, dv, opt);
    pm::detail::attention_reference_backward(q, k, v, probs, go, rq, rk, rv);
    CHECK(rel_err(dq, as_double(rq)) <= 1e-5);
    CHECK(rel_err(dk, as_double(rk)) <= 1e-5);
    CHECK(rel_err(dv, as_double(rv)) <= 1e-5);
    // without the saved out, backward recomputes it with forward's blocks: the same gradients, bitwise
    pm::attention_saved lean = saved;
    lean.out = tensor();
    tensor lq = filled(q.shape(), 7.0f), lk = filled(k.shape(), 7.0f), lv = filled(v.shape(), 7.0f);
    pm::attention_backward(q, k, v, lean, go, lq, lk, lv, opt);
    CHECK(std::memcmp(lq.data(), dq.data(), dq.nbytes()) == 0);
    CHECK(std::memcmp(lk.data(), dk.data(), dk.nbytes()) == 0);
    CHECK(std::memcmp(lv.data(), dv.data(), dv.nbytes()) == 0);
    // δ = rowsum(dO ⊙ O) given instead of out (Ulysses' exchange_delta): the same gradients, bitwise
    pm::attention_saved given = lean;
    given.delta = pm::attention_delta(out, go);
    CHECK(given.delta.shape() == shape{c.b, c.sq, c.h, 1});
    tensor gq = filled(q.shape(), 7.0f), gk = filled(k.shape(), 7.0f), gv = filled(v.shape(), 7.0f);
    pm::attention_backward(q, k, v, given, go, gq, gk, gv, opt);
    CHECK(std::memcmp(gq.data(), dq.data(), dq.nbytes()) == 0);
    CHECK(std::memcmp(gk.data(), dk.data(), dk.nbytes()) == 0);
    CHECK(std::memcmp(gv.data(), dv.data(), dv.nbytes()) == 0);
    // backward's blocks need not be forward's
    pm::attention_backward(q, k, v, saved, go, dq, dk, dv, {.block_q = c.bk, .block_k = c.bq + 1});
    CHECK(rel_err(dq, as_double(rq)) <= 1e-5);
    CHECK(rel_err(dk, as_double(rk)) <= 1e-5);
    CHECK(rel_err(dv, as_double(rv)) <= 1e-5);
    pm::attention_backward(q, k, v, lean, go, lq, lk, lv, {.block_q = c.bk, .block_k = c.bq + 1});  // O to rounding
    CHECK(rel_err(lq, as_double(rq)) <= 1e-5);
    CHECK(rel_err(lk, as_double(rk)) <= 1e-5);
    CHECK(rel_err(lv, as_double(rv)) <= 1e-5);
    if (c.causal && c.sk > c.sq) {  // keys after the last query: no gradient, exactly
      const std::int64_t row = c.h * c.d;
      CHECK(std::all_of(dk.data<float>() + c.sq * row, dk.data<float>() + c.sk * row, [](float x) { return x == 0.0f; }));
      CHECK(std::all_of(dv.data<float>() + c.sq * row, dv.data<float>() + c.sk * row, [](float x) { return x == 0.0f; }));
    }
  }
}

TEST_CASE("math: attention's saved state is O(S): lse and out, not the S² probabilities") {
  std::mt19937 rng(14);
  const std::int64_t B = 1, S = 4096, H = 1, D = 16;
  tensor q = random_tensor(shape{B, S, H, D}, rng), k = random_tensor(shape{B, S, H, D}, rng);
  tensor v = random_tensor(shape{B, S, H, D}, rng), out = tensor::empty(q.shape(), dtype::f32);
  const auto saved = pm::attention_forward(q, k, v, true, out);
  CHECK(saved.lse.nbytes() == static_cast<std::size_t>(B * H * S * 4));
  CHECK(saved.out.nbytes() == static_cast<std::size_t>(B * S * H * D * 4));
  CHECK(saved.out.data() == out.data());  // an owning out is shared, not copied
  CHECK(saved.lse.nbytes() + saved.out.nbytes() < static_cast<std::size_t>(S * S * 4) / 100);
  tensor ref = tensor::empty(q.shape(), dtype::f32);
  (void)pm::detail::attention_reference_forward(q, k, v, true, ref);
  CHECK(rel_err(out, std::vector<double>(ref.data<float>(), ref.data<float>() + ref.numel())) <= 1e-5);
}

TEST_CASE("math: attention shares an owning out and copies a view out, with equal gradients") {
  std::mt19937 rng(15);
  const shape s{2, 33, 2, 8};
  const tensor q = random_tensor(s, rng), k = random_tensor(s, rng), v = random_tensor(s, rng);
  const tensor dout = random_tensor(s, rng);
  tensor owned = tensor::empty(s, dtype::f32), viewed = tensor::empty(s, dtype::f32);
  const auto a = pm::attention_forward(q, k, v, true, owned);
  const auto b = pm::attention_forward(q, k, v, true, viewed.view());
  CHECK(a.out.data() == owned.data());
  CHECK(b.out.data() != viewed.data());
  CHECK(std::memcmp(owned.data(), viewed.data(), owned.nbytes()) == 0);
  CHECK(std::memcmp(b.out.data(), viewed.data(), viewed.nbytes()) == 0);
  std::vector<tensor> g;
  for (int i = 0; i < 6; ++i) g.push_back(tensor::empty(s, dtype::f32));
  pm::attention_backward(q, k, v, a, dout, g[0], g[1], g[2]);
  pm::attention_backward(q, k, v, b, dout, g[3], g[4], g[5]);
  for (int i = 0; i < 3; ++i) CHECK(std::memcmp(g[i].data(), g[i + 3].data(), g[i].nbytes()) == 0);
}

TEST_CASE("math: embedding forward gathers rows, backward scatter-adds, bad ids throw and write nothing") {
  std::mt19937 rng(10);
  const std::int64_t V = 5, H = 3;
  tensor table = random_tensor(shape{V, H}, rng);
  tensor ids = ids_tensor(shape{2, 3}, {4, 0, 2, 2, 4, 4});
  tensor out = tensor::empty(shape{2, 3, H}, dtype::f32);
  pm::embedding_forward(ids, table, out);
  for (std::int64_t i = 0; i < 6; ++i)
    CHECK(std::equal(out.data<float>() + i * H, out.data<float>() + (i + 1) * H, table.data<float>() + ids.data<std::int64_t>()[i] * H));

  tensor dout = random_tensor(shape{2, 3, H}, rng);
  tensor dtable = filled(shape{V, H}, 1.0f);
  pm::embedding_backward(ids, dout, dtable);
  std::vector<double> want(V * H, 1.0);
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t j = 0; j < H; ++j) want[ids.data<std::int64_t>()[i] * H + j] += dout.data<float>()[i * H + j];
  CHECK(rel_err(dtable, want) <= 1e-6);
  for (std::int64_t j = 0; j < H; ++j) CHECK(dtable.data<float>()[1 * H + j] == 1.0f);  // id 1 unused
  CHECK(fd_rel_err(table, [&] { pm::embedding_forward(ids, table, out); return dot(out, dout); },
                   [&] { tensor g = filled(shape{V, H}, 0.0f); pm::embedding_backward(ids, dout, g); return g; }()) <= 1e-2);

  tensor bad = ids_tensor(shape{2, 3}, {0, 1, 5, 0, 0, 0});
  tensor before = dtable.clone();
  try {
    pm::embedding_backward(bad, dout, dtable);
    FAIL("no throw");
  } catch (const jitembed::error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.message().find("id 5 at index 2 outside [0, 5)") != std::string::npos);
  }
  CHECK(std::equal(dtable.data<float>(), dtable.data<float>() + dtable.numel(), before.data<float>()));
  CHECK(code_of([&] { pm::embedding_forward(ids_tensor(shape{1}, {-1}), table, filled(shape{1, H}, 0.0f)); }) ==
        errc::invalid_argument);
  tensor ids32 = tensor::zeros(shape{2, 3}, dtype::i32);
  CHECK(code_of([&] { pm::embedding_forward(ids32, table, out); }) == errc::dtype_mismatch);
  CHECK(code_of([&] { pm::embedding_forward(ids, table, filled(shape{6, H}, 0.0f)); }) == errc::invalid_argument);
}

TEST_CASE("math: cross entropy vs naive double, dlogits vs finite differences") {
  std::mt19937 rng(11);
  const std::int64_t M = 4, V = 6;
  tensor logits = random_tensor(shape{M, V}, rng, -3.0f, 3.0f);
  tensor targets = ids_tensor(shape{M}, {0, 5, 2, 2});
  tensor dl = filled(shape{M, V}, 3.0f);  // overwritten
  const tensor_view dlv = dl;
  const float loss = pm::cross_entropy_forward_backward(logits, targets, &dlv);
  double want = 0;
  std::vector<double> dref(M * V);
  for (std::int64_t i = 0; i < M; ++i) {
    double z = 0;
    for (std::int64_t j = 0; j < V; ++j) z += std::exp(static_cast<double>(logits.data<float>()[i * V + j]));
    want += -(logits.data<float>()[i * V + targets.data<std::int64_t>()[i]] - std::log(z)) / M;
    for (std::int64_t j = 0; j < V; ++j)
      dref[i * V + j] = (std::exp(static_cast<double>(logits.data<float>()[i * V + j])) / z -
                         (j == targets.data<std::int64_t>()[i] ? 1.0 : 0.0)) / M;
  }
  CHECK(loss == doctest::Approx(want).epsilon(1e-6));
  CHECK(rel_err(dl, dref) <= 1e-6);
  CHECK(fd_rel_err(logits, [&] { return static_cast<double>(pm::cross_entropy_forward_backward(logits, targets, nullptr)); }, dl) <= 1e-2);

  // large logits stay finite (stable log-sum-exp); dlogits may alias logits
  tensor big = filled(shape{1, 3}, 1000.0f);
  big.data<float>()[1] = 1001.0f;
  const tensor_view bigv = big;
  const float lb = pm::cross_entropy_forward_backward(big, ids_tensor(shape{1}, {1}), &bigv);
  CHECK(std::isfinite(lb));
  CHECK(lb == doctest::Approx(std::log(1.0 + 2.0 * std::exp(-1.0))).epsilon(1e-5));
  CHECK(big.data<float>()[1] == doctest::Approx(1.0 / (1.0 + 2.0 * std::exp(-1.0)) - 1.0).epsilon(1e-5));

  CHECK(code_of([&] { (void)pm::cross_entropy_forward_backward(logits, ids_tensor(shape{M}, {0, 6, 0, 0}), nullptr); }) ==
        errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::cross_entropy_forward_backward(logits, ids_tensor(shape{3}, {0, 1, 2}), nullptr); }) ==
        errc::invalid_argument);
  CHECK(code_of([&] { (void)pm::cross_entropy_forward_backward(logits, tensor::zeros(shape{M}, dtype::i32), nullptr); }) ==
        errc::dtype_mismatch);
  CHECK(pm::cross_entropy_forward_backward(tensor::empty(shape{0, V}, dtype::f32), tensor::empty(shape{0}, dtype::i64), nullptr) == 0.0f);
}

TEST_CASE("math: add_inplace adds, rejects mismatched shapes") {
  tensor y = filled(shape{2, 3}, 1.5f), x = filled(shape{2, 3}, 2.0f);
  pm::add_inplace(y, x);
  for (std::uint64_t i = 0; i < y.numel(); ++i) CHECK(y.data<float>()[i] == 3.5f);
  pm::add_inplace(y, y);
  CHECK(y.data<float>()[0] == 7.0f);
  CHECK(code_of([&] { pm::add_inplace(y, filled(shape{3, 2}, 0.0f)); }) == errc::invalid_argument);
  CHECK(code_of([&] { pm::add_inplace(y, tensor::zeros(shape{2, 3}, dtype::f64)); }) == errc::dtype_mismatch);
}

namespace user_code {
using namespace jitembed;  // what an application does; OpenBLAS's global bfloat16 must not make this ambiguous
inline float round_trip(float v) { return static_cast<float>(bfloat16(v)); }
}  // namespace user_code

TEST_CASE("math.hpp keeps OpenBLAS's global bfloat16 typedef away from jitembed::bfloat16") {
  CHECK(user_code::round_trip(1.5f) == 1.5f);
  pm::set_blas_threads(1);
}
