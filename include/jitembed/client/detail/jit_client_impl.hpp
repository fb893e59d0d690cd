// jit_client's member functions (client/jit_client.hpp): included there in header-only mode, from
// client/src.hpp in separate compilation (core/config.hpp).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/client/detail/client_state.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/core/config.hpp"

namespace jitembed::client {

JITEMBED_DECL result<jit_client> jit_client::create(const client_options& opts) {
  JITEMBED_ASSIGN_OR_RETURN(auto s, detail::client_state::create(opts));
  return jit_client(std::move(s));
}
JITEMBED_DECL jit_client::request_id jit_client::embed(embed_request req, embed_callback done) {
  return state_->engine().embed(std::move(req), std::move(done));
}
JITEMBED_DECL std::future<result<embed_result>> jit_client::embed(embed_request req, std::stop_token stop) {
  // The stop callback lives until the request completes; it holds the state weakly (a cancelled future
  // must not keep a closed client alive). It is made outside `mu` (its constructor runs it at once when
  // stop was already requested, and cancel() may complete the request on this thread) and destroyed
  // outside `mu` (its destructor waits for a run in progress on another thread).
  using stop_cb = std::stop_callback<std::function<void()>>;
  struct pending {
    std::promise<result<embed_result>> promise;
    std::mutex mu;
    bool done = false;
    std::unique_ptr<stop_cb> on_stop;
  };
  auto p = std::make_shared<pending>();
  auto f = p->promise.get_future();
  const request_id id = state_->engine().embed(std::move(req), [p](result<embed_result> r) {
    std::unique_ptr<stop_cb> gone;
    {
      std::lock_guard lk(p->mu);
      p->done = true;
      gone = std::move(p->on_stop);
    }
    gone.reset();
    p->promise.set_value(std::move(r));
  });
  if (stop.stop_possible()) {
    auto cb = std::make_unique<stop_cb>(stop, std::function<void()>([w = std::weak_ptr<detail::client_state>(state_), id] {
      if (auto s = w.lock()) s->engine().cancel(id);
    }));
    std::lock_guard lk(p->mu);
    if (!p->done) p->on_stop = std::move(cb);
    // else: cb is destroyed after the lock (declared before it)
  }
  return f;
}
JITEMBED_DECL bool jit_client::cancel(request_id id) { return state_->engine().cancel(id); }
JITEMBED_DECL result<model_identity> jit_client::identity(const std::string& model) { return state_->control().identity(model); }
JITEMBED_DECL result<model_metadata> jit_client::metadata(const std::string& model) { return state_->control().metadata(model); }
JITEMBED_DECL result<void> jit_client::wait_ready(const std::vector<std::string>& models, std::chrono::milliseconds timeout) {
  return state_->control().wait_ready(models, timeout);
}
JITEMBED_DECL client_stats jit_client::stats() const { return state_->engine().stats(); }
JITEMBED_DECL std::vector<std::string> jit_client::endpoints() const {
  std::vector<std::string> out;
  for (const auto& a : state_->control().live_endpoints()) out.push_back(a.url);
  return out;
}
JITEMBED_DECL bool jit_client::local() const noexcept { return state_->local(); }
JITEMBED_DECL void jit_client::close() {
  if (state_) state_->close();
}

}  // namespace jitembed::client
