// nn::adamw: the update torch.optim.AdamW makes (goldens from PyTorch 2.15, foreach=False, f32), its errors,
// and an exact resume: state() copied out mid-run and load_state() into a fresh optimizer continue bitwise
// identically to the uninterrupted run.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "jitembed/nn/adamw.hpp"

using namespace jitembed;

namespace {

tensor values(std::vector<float> v) {
  return tensor::copy_of(bytes_view(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)), dtype::f32,
                         shape{static_cast<std::int64_t>(v.size())});
}
std::vector<float> read(const tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

}  // namespace

TEST_CASE("adamw: three steps equal torch.optim.AdamW (lr 1e-2, betas 0.9 0.999, eps 1e-8, weight decay 0.1)") {
  // torch: p = Parameter([0.5, -1, 2, 0, 1e-3]); AdamW(..., foreach=False); grads below; p after each step
  tensor p = values({0.5f, -1.0f, 2.0f, 0.0f, 1e-3f});
  auto opt = nn::adamw::create({{"w", p}}, {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1})
                 .value();
  const std::vector<std::vector<float>> grads = {
      {0.1f, -0.2f, 0.3f, 0.0f, 1.0f}, {-0.05f, 0.4f, 0.1f, 1e-4f, -1.0f}, {0.2f, 0.2f, -0.3f, 0.5f, 0.0f}};
  const std::vector<std::vector<float>> torch_after = {
      {0.489500016f, -0.989000022f, 1.98800004f, 0.0f, -0.00900099985f},
      {0.486347139f, -0.991672099f, 1.97730148f, -0.00744031649f, -0.00846568309f},
      {0.479279667f, -0.995872855f, 1.97484028f, -0.0138221616f, -0.00805037376f}};
  for (std::size_t s = 0; s < grads.size(); ++s) {
    REQUIRE(opt.step({{"w", values(grads[s])}}).has_value());
    const auto got = read(p);
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(s);
      CAPTURE(i);
      // within 1e-6 relative (measured: at most 1 ulp; torch's vectorized lerp / addcmul fuse multiply-adds)
      CHECK(got[i] == doctest::Approx(torch_after[s][i]).epsilon(1e-6));
    }
  }
  CHECK(opt.steps() == 3);
}

TEST_CASE("adamw: a missing, extra or misshapen gradient changes nothing and names the parameter") {
  tensor a = values({1, 2}), b = values({3});
  auto opt = nn::adamw::create({{"a", a}, {"b", b}}).value();
  CHECK(opt.step({{"a", values({1, 1})}}).error().message == "adamw: no gradient for parameter 'b'");
  CHECK(opt.step({{"a", values({1, 1})}, {"b", values({1, 1})}}).error().message ==
        "adamw: the gradient of 'b' is not f32 contiguous of its shape");
  CHECK(opt.step({{"a", values({1, 1})}, {"b", values({1})}, {"c", values({1})}}).code() == errc::invalid_argument);
  CHECK(read(a) == std::vector<float>{1, 2});
  CHECK(opt.steps() == 0);
  CHECK(nn::adamw::create({{"a", a}, {"a", b}}).error().message == "adamw: parameter 'a' twice");
  CHECK(nn::adamw::create({{"i", tensor::zeros(shape{2}, dtype::i32)}}).code() == errc::invalid_argument);
  CHECK(nn::adamw::create({{"a", a}}, {.beta1 = 1.0}).code() == errc::invalid_argument);
  named_tensors bad = opt.state();
  bad.erase(bad.begin() + 1);  // drop exp_avg/a
  CHECK(opt.load_state(bad).error().message == "adamw state: 'exp_avg/a' missing or not f32 of the parameter's shape");
}

TEST_CASE("adamw: gradients in another order than the parameters give the same update") {
  tensor a1 = values({1, 2}), b1 = values({3}), a2 = values({1, 2}), b2 = values({3});
  auto in_order = nn::adamw::create({{"a", a1}, {"b", b1}}).value();
  auto reversed = nn::adamw::create({{"a", a2}, {"b", b2}}).value();
  REQUIRE(in_order.step({{"a", values({0.5f, -1})}, {"b", values({2})}}).has_value());
  REQUIRE(reversed.step({{"b", values({2})}, {"a", values({0.5f, -1})}}).has_value());
  CHECK(read(a1) == read(a2));
  CHECK(read(b1) == read(b2));
  CHECK(read(a1) != std::vector<float>{1, 2});
  // a name that is neither in place nor anywhere: the parameter it misses is named
  CHECK(reversed.step({{"b", values({2})}, {"c", values({1, 1})}}).error().message ==
        "adamw: no gradient for parameter 'a'");
}

TEST_CASE("adamw: state() then load_state() into a fresh optimizer resumes bitwise") {
  const auto grad_of = [](const tensor& p, int step) {  // a deterministic gradient that depends on p
    tensor g = tensor::empty(p.shape(), dtype::f32);
    for (std::uint64_t i = 0; i < p.numel(); ++i)
      g.data<float>()[i] = p.data<float>()[i] * 0.5f - 0.1f * static_cast<float>((step + static_cast<int>(i)) % 7);
    return g;
  };
  const std::vector<float> init = {0.3f, -0.7f, 1.1f, 0.05f, -2.0f, 0.9f};
  // uninterrupted: 10 steps
  tensor full = values(init);
  auto a = nn::adamw::create({{"w", full}}, {.lr = 3e-2}).value();
  for (int s = 0; s < 10; ++s) REQUIRE(a.step({{"w", grad_of(full, s)}}));
  // interrupted at 4: parameters and state copied out, a new optimizer over a new tensor loads them
  tensor first = values(init);
  auto b = nn::adamw::create({{"w", first}}, {.lr = 3e-2}).value();
  for (int s = 0; s < 4; ++s) REQUIRE(b.step({{"w", grad_of(first, s)}}));
  const named_tensors saved = b.state();
  CHECK(*find_tensor(saved, "step")->data<std::int64_t>() == 4);
  tensor resumed = values(read(first));
  auto c = nn::adamw::create({{"w", resumed}}, {.lr = 3e-2}).value();
  REQUIRE(c.load_state(saved));
  for (int s = 4; s < 10; ++s) REQUIRE(c.step({{"w", grad_of(resumed, s)}}));
  CHECK(c.steps() == 10);
  CHECK(std::memcmp(resumed.data(), full.data(), full.nbytes()) == 0);
}
