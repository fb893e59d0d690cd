// The module behind a torch_model, type-erased: TorchScript, C++ torch::nn modules, AnyModule, and
// AOTInductor packages (.pt2, torch::inductor::AOTIModelPackageLoader).
#pragma once

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/script.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/models/detail/torch_convert.hpp"

namespace jitembed::models::detail {

// The module behind a torch_model, type-erased. forward() may throw (c10::Error); it runs concurrently.
struct torch_backend {
  virtual ~torch_backend() = default;
  virtual c10::IValue forward(torch::Tensor x) const = 0;
  virtual named_torch_tensors state() const = 0;  // parameters, then buffers, recursively
  virtual void prepare(c10::Device dev) = 0;      // eval mode, moved to dev
};

struct torch_script_backend final : torch_backend {
  explicit torch_script_backend(torch::jit::Module mod) : m(std::move(mod)) {}
  c10::IValue forward(torch::Tensor x) const override { return m.forward({std::move(x)}); }
  named_torch_tensors state() const override {
    named_torch_tensors r;
    for (const auto& p : m.named_parameters(true)) r.emplace_back(p.name, p.value);
    for (const auto& b : m.named_buffers(true)) r.emplace_back("buffer:" + b.name, b.value);
    return r;
  }
  void prepare(c10::Device dev) override {
    m.eval();
    m.to(dev);
  }
  mutable torch::jit::Module m;  // a handle; its forward is not const but is safe to run concurrently
};

inline named_torch_tensors nn_state(const torch::nn::Module& m) {
  named_torch_tensors r;
  for (const auto& p : m.named_parameters(true)) r.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers(true)) r.emplace_back("buffer:" + b.key(), b.value());
  return r;
}

// forward's C++ result -> IValue (Tensor, std::tuple of Tensors, std::vector<Tensor>, map of name -> Tensor).
template <class T>
c10::IValue to_ivalue(T&& v) {
  return c10::IValue(std::forward<T>(v));
}

template <class M>
struct torch_nn_backend final : torch_backend {
  explicit torch_nn_backend(std::shared_ptr<M> mod) : m(std::move(mod)) {}
  c10::IValue forward(torch::Tensor x) const override { return to_ivalue(m->forward(std::move(x))); }
  named_torch_tensors state() const override { return nn_state(*m); }
  void prepare(c10::Device dev) override {
    m->eval();
    m->to(dev);
  }
  std::shared_ptr<M> m;
};

struct torch_any_backend final : torch_backend {
  explicit torch_any_backend(torch::nn::AnyModule mod) : m(std::move(mod)) {}
  c10::IValue forward(torch::Tensor x) const override { return c10::IValue(m.forward(std::move(x))); }
  named_torch_tensors state() const override { return nn_state(*m.ptr()); }
  void prepare(c10::Device dev) override {
    m.ptr()->eval();
    m.ptr()->to(dev);
  }
  mutable torch::nn::AnyModule m;
};

// An AOTInductor package: compiled for one device (its metadata's AOTI_DEVICE_KEY, "cpu" or "cuda"), a dynamic
// batch dim when exported with one. The loader serves `runners` concurrent run() calls (more wait for a free
// runner). State for the fingerprint: the package's constants (its weights), by name.
struct torch_aoti_backend final : torch_backend {
  explicit torch_aoti_backend(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> l) : loader(std::move(l)) {}
  c10::IValue forward(torch::Tensor x) const override {
    std::vector<torch::Tensor> ys = loader->run({std::move(x)});
    if (ys.size() == 1) return c10::IValue(std::move(ys.front()));
    return c10::IValue(c10::List<torch::Tensor>(ys));
  }
  named_torch_tensors state() const override {
    named_torch_tensors r;
    auto* runner = loader->get_runner();
    if (runner == nullptr) return r;
    for (const auto& [name, t] : runner->extract_constants_map(false)) r.emplace_back(name, t);
    std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return r;
  }
  void prepare(c10::Device dev) override {
    const auto meta = loader->get_metadata();
    const auto it = meta.find("AOTI_DEVICE_KEY");
    const std::string compiled = it == meta.end() ? std::string("cpu") : it->second;
    const std::string wanted = dev.is_cpu() ? "cpu" : c10::DeviceTypeName(dev.type(), true);
    if (compiled != wanted)
      throw std::invalid_argument("the AOTInductor package is compiled for " + compiled + ", the model is placed on " +
                                  dev.str() + " (export it for that device)");
  }
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
};

}  // namespace jitembed::models::detail
