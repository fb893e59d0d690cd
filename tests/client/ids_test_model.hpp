// A text model whose input is token ids (i64 [2, 4]: ids and mask), for the typed-row tests of the client,
// the loader and gRPC: a caption's first 4 bytes are its ids (padded with 0, mask 0), so a caption of 4 bytes
// or more and its ids sent as "input_ids" (mask all ones) give the same output. An optional gate holds run().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/models/any_model.hpp"

namespace ids_test {

using namespace jitembed;

// Opened once; every run() waits for it (a coalescing test keeps a call in flight without sleeping).
struct gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard lk(mu);
      open = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return open; });
  }
};

// Output "s" f32 [2]: (sum of (k + 1) * id_k * mask_k, sum of mask_k): the order of the ids matters.
class ids_model {
 public:
  explicit ids_model(std::shared_ptr<gate> g = nullptr) : gate_(std::move(g)) {}
  std::string_view name() const { return "ids"; }
  std::string_view version() const { return "ids-1"; }
  std::string_view preprocess_key() const { return "tokens=bytes"; }
  models::modality input_modality() const { return models::modality::text; }
  std::span<const models::tensor_meta> inputs() const { return in_; }
  std::span<const models::tensor_meta> outputs() const { return out_; }
  std::size_t max_batch_size() const { return 8; }
  jitembed::device device() const { return jitembed::device::cpu(); }
  result<tensor> preprocess(bytes_view raw, const decode_limits&) const {
    tensor t = tensor::zeros({2, 4}, dtype::i64);
    for (std::size_t i = 0; i < raw.size() && i < 4; ++i) {
      t.data<std::int64_t>()[i] = static_cast<std::int64_t>(raw[i]);
      t.data<std::int64_t>()[4 + i] = 1;
    }
    return t;
  }
  result<std::vector<models::named_tensors>> run(std::span<const tensor> batch) const {
    if (gate_) gate_->wait();
    std::vector<models::named_tensors> out;
    for (const auto& x : batch) {
      const auto* v = x.data<std::int64_t>();
      tensor s = tensor::zeros({2}, dtype::f32);
      for (int i = 0; i < 4; ++i) {
        s.data<float>()[0] += static_cast<float>((i + 1) * v[i] * v[4 + i]);
        s.data<float>()[1] += static_cast<float>(v[4 + i]);
      }
      out.push_back({{"s", std::move(s)}});
    }
    return out;
  }

 private:
  std::shared_ptr<gate> gate_;
  std::vector<models::tensor_meta> in_{{"INPUT__0", dtype::i64, {2, 4}}};
  std::vector<models::tensor_meta> out_{{"s", dtype::f32, {2}}};
};

// The ids of a caption as the model reads them (its first 4 bytes), as T.
template <class T>
std::vector<T> ids_of(std::string_view caption) {
  std::vector<T> v(4, 0);
  for (std::size_t i = 0; i < caption.size() && i < 4; ++i)
    v[i] = static_cast<T>(static_cast<unsigned char>(caption[i]));
  return v;
}

template <class T>
bytes_view bytes_of(const std::vector<T>& v) {
  return bytes_view(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T));
}

}  // namespace ids_test
