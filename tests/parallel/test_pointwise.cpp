// The __host__ __device__ elementwise bodies (nn/pointwise.hpp) that the CUDA kernels run, checked on the CPU
// against the nn ops: GELU and its derivative, LayerNorm and cross-entropy composed from their pieces, the
// online softmax, and bf16 rounding against core's bfloat16.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/nn.hpp"
#include "jitembed/nn/pointwise.hpp"

using namespace jitembed;
namespace pw = jitembed::nn::pointwise;

namespace {

std::vector<float> randv(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

tensor_view view(std::vector<float>& v, const shape& s) { return tensor_view(v.data(), dtype::f32, s); }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

}  // namespace

TEST_CASE("pointwise: gelu and gelu_grad are the bodies of nn::gelu_forward / gelu_backward") {
  auto x = randv(1000, 1, 3.0f), dy = randv(1000, 2);
  std::vector<float> y(1000), dx(1000);
  nn::gelu_forward(view(x, shape{1000}), view(y, shape{1000}));
  nn::gelu_backward(view(x, shape{1000}), view(dy, shape{1000}), view(dx, shape{1000}));
  for (std::size_t i = 0; i < x.size(); ++i) {
    REQUIRE(pw::gelu(x[i]) == y[i]);
    REQUIRE(pw::gelu_grad(x[i], dy[i]) == dx[i]);
  }
  // and the derivative is the derivative: central differences in double
  for (float v : {-3.0f, -1.0f, -0.1f, 0.0f, 0.5f, 2.0f}) {
    const double h = 1e-3;
    const double fd = (pw::gelu(static_cast<float>(v + h)) - pw::gelu(static_cast<float>(v - h))) / (2 * h);
    CHECK(std::abs(pw::gelu_grad(v, 1.0f) - fd) < 2e-3);
  }
}

TEST_CASE("pointwise: LayerNorm from its pieces equals nn::layer_norm_forward / backward") {
  const std::int64_t m = 6, h = 37;
  auto x = randv(m * h, 3, 2.0f), gamma = randv(h, 4), beta = randv(h, 5), dy = randv(m * h, 6);
  std::vector<float> y(m * h), dx(m * h), dg(h, 0.0f), db(h, 0.0f);
  const auto saved = nn::layer_norm_forward(view(x, shape{m, h}), view(gamma, shape{h}), view(beta, shape{h}), 1e-5f,
                                            view(y, shape{m, h}));
  const tensor_view dgv = view(dg, shape{h}), dbv = view(db, shape{h});
  nn::layer_norm_backward(view(x, shape{m, h}), view(gamma, shape{h}), saved, view(dy, shape{m, h}),
                          view(dx, shape{m, h}), &dgv, &dbv);
  std::vector<float> y2(m * h), dx2(m * h);
  for (std::int64_t i = 0; i < m; ++i) {
    const float* r = x.data() + i * h;
    float s = 0, ss = 0;
    for (std::int64_t j = 0; j < h; ++j) s += r[j];
    const float mean = s / static_cast<float>(h);
    for (std::int64_t j = 0; j < h; ++j) ss += (r[j] - mean) * (r[j] - mean);
    const float rstd = pw::layer_norm_rstd(ss / static_cast<float>(h), 1e-5f);
    CHECK(std::abs(rstd - saved.rstd.data<float>()[i]) <= 1e-5f * rstd);
    float sg = 0, sgx = 0;
    for (std::int64_t j = 0; j < h; ++j) {
      y2[i * h + j] = pw::layer_norm_apply(r[j], mean, rstd, gamma[j], beta[j]);
      const float g = dy[i * h + j] * gamma[j];
      sg += g;
      sgx += g * (r[j] - mean) * rstd;
    }
    for (std::int64_t j = 0; j < h; ++j) {
      const float g = dy[i * h + j] * gamma[j];
      dx2[i * h + j] = pw::layer_norm_dx(rstd, g, sg / h, (r[j] - mean) * rstd, sgx / h);
    }
  }
  CHECK(max_diff(y2, y) <= 1e-5 * max_abs(y));
  CHECK(max_diff(dx2, dx) <= 1e-5 * max_abs(dx));
}

TEST_CASE("pointwise: online softmax and softmax_grad equal the row softmax of nn::attention") {
  // softmax_merge over any split of a row gives the row's max and sum; probabilities equal a direct softmax.
  auto row = randv(50, 7, 4.0f);
  pw::softmax_state a, b, all;
  for (std::size_t j = 0; j < row.size(); ++j) {
    (j < 17 ? a : b) = pw::softmax_push(j < 17 ? a : b, row[j]);
    all = pw::softmax_push(all, row[j]);
  }
  const pw::softmax_state merged = pw::softmax_merge(a, b);
  const float mx = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  CHECK(merged.max == mx);
  CHECK(std::abs(merged.sum - sum) <= 1e-5 * sum);
  CHECK(std::abs(all.sum - sum) <= 1e-5 * sum);
  CHECK(pw::softmax_merge(pw::softmax_state{}, a).sum == a.sum);

  // attention with one query and one head: probabilities are the softmax of q·k/√D; dq via softmax_grad.
  const std::int64_t sk = 9, d = 4;
  auto q = randv(d, 8), k = randv(sk * d, 9), v = randv(sk * d, 10), dout = randv(d, 11);
  std::vector<float> out(d), dq(d), dk(sk * d), dv(sk * d);
  const auto saved = nn::attention_forward(view(q, shape{1, 1, 1, d}), view(k, shape{1, sk, 1, d}),
                                           view(v, shape{1, sk, 1, d}), false, view(out, shape{1, 1, 1, d}));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  pw::softmax_state st;
  std::vector<float> s(sk), p(sk), dp(sk);
  for (std::int64_t j = 0; j < sk; ++j) {
    float acc = 0;
    for (std::int64_t t = 0; t < d; ++t) acc += q[t] * k[j * d + t];
    s[j] = acc * scale;
    st = pw::softmax_push(st, s[j]);
  }
  CHECK(std::abs(saved.lse.data<float>()[0] - pw::log_sum_exp(st)) <= 1e-5f);
  for (std::int64_t j = 0; j < sk; ++j) {
    p[j] = pw::softmax_exp(s[j], st.max) / st.sum;
    CHECK(std::abs(p[j] - pw::softmax_exp(s[j], saved.lse.data<float>()[0])) <= 1e-6f);  // P = exp(s − lse)
  }
  nn::attention_backward(view(q, shape{1, 1, 1, d}), view(k, shape{1, sk, 1, d}), view(v, shape{1, sk, 1, d}), saved,
                         view(dout, shape{1, 1, 1, d}), view(dq, shape{1, 1, 1, d}), view(dk, shape{1, sk, 1, d}),
                         view(dv, shape{1, sk, 1, d}));
  float dot = 0;
  for (std::int64_t j = 0; j < sk; ++j) {
    float acc = 0;
    for (std::int64_t t = 0; t < d; ++t) acc += dout[t] * v[j * d + t];
    dp[j] = acc;
    dot += dp[j] * p[j];
  }
  std::vector<float> dq2(d, 0.0f);
  for (std::int64_t j = 0; j < sk; ++j) {
    const float ds = pw::softmax_grad(p[j], dp[j], dot);
    for (std::int64_t t = 0; t < d; ++t) dq2[t] += ds * k[j * d + t] * scale;
  }
  CHECK(max_diff(dq2, dq) <= 1e-5 * max_abs(dq));
}

TEST_CASE("pointwise: cross-entropy from its pieces equals nn::cross_entropy_forward_backward") {
  const std::int64_t m = 5, v = 23;
  auto logits = randv(m * v, 12, 3.0f);
  std::vector<std::int64_t> targets{0, 22, 7, 7, 13};
  std::vector<float> dl(m * v);
  const tensor_view dlv = view(dl, shape{m, v});
  const float loss = nn::cross_entropy_forward_backward(view(logits, shape{m, v}),
                                                        tensor_view(targets.data(), dtype::i64, shape{m}), &dlv);
  std::vector<float> dl2(m * v);
  double total = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    pw::softmax_state st;
    for (std::int64_t j = 0; j < v; ++j) st = pw::softmax_push(st, logits[i * v + j]);
    const float lse = pw::log_sum_exp(st);
    total += pw::cross_entropy_loss(lse, logits[i * v + targets[i]]);
    for (std::int64_t j = 0; j < v; ++j)
      dl2[i * v + j] = pw::cross_entropy_grad(logits[i * v + j], lse, j == targets[i], 1.0f / static_cast<float>(m));
  }
  CHECK(std::abs(total / m - loss) <= 1e-5 * std::abs(loss));
  CHECK(max_diff(dl2, dl) <= 1e-5 * max_abs(dl));
}

TEST_CASE("pointwise: bf16 rounding is core's bfloat16, bit for bit") {
  std::mt19937 gen(13);
  std::vector<float> values{0.0f, -0.0f, 1.0f, -1.5f, 3.1415926f, 1e-40f, 65504.0f, 3.4e38f, INFINITY, -INFINITY,
                            1.00390625f /* a tie: rounds to even */, 1.01171875f};
  for (int i = 0; i < 10000; ++i) {
    const std::uint32_t u = gen();
    values.push_back(pw::bits_float(u));
  }
  for (float f : values) {
    const std::uint16_t b = pw::bf16_from_float(f);
    REQUIRE(b == bfloat16(f).bits);
    if (!std::isnan(f)) {
      REQUIRE(pw::bf16_to_float(b) == static_cast<float>(bfloat16::from_bits(b)));
      CHECK(pw::bf16_round(pw::bf16_round(f)) == pw::bf16_round(f));
    } else {
      CHECK(std::isnan(pw::bf16_round(f)));
    }
  }
}
