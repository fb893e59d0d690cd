// Where one request's result goes: a promise (submit returning a future) or a user callback.
#pragma once

#include <functional>
#include <future>
#include <utility>
#include <variant>

#include "jitembed/core/error.hpp"

namespace jitembed::batching::detail {

template <class Response>
class completion {
 public:
  using callback_type = std::function<void(result<Response>)>;

  explicit completion(std::promise<result<Response>> p) : target_(std::in_place_index<0>, std::move(p)) {}
  explicit completion(callback_type cb) : target_(std::in_place_index<1>, std::move(cb)) {}

  // Fulfils the promise or calls the callback; false if the callback threw (the exception is swallowed:
  // it runs on a runner thread, where nobody could catch it).
  bool deliver(result<Response>&& r) noexcept {
    if (target_.index() == 0) {
      try {
        std::get<0>(target_).set_value(std::move(r));
      } catch (...) {
        return false;  // cannot happen: each completion is delivered once
      }
      return true;
    }
    try {
      std::get<1>(target_)(std::move(r));
    } catch (...) {
      return false;
    }
    return true;
  }

 private:
  std::variant<std::promise<result<Response>>, callback_type> target_;
};

}  // namespace jitembed::batching::detail
