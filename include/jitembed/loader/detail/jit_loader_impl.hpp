// jit_loader's member functions (loader/jit_loader.hpp): included there in header-only mode, from
// loader/src.hpp in separate compilation (core/config.hpp), with the engine's out-of-line members.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "jitembed/core/config.hpp"
#include "jitembed/loader/detail/loader_state.hpp"
#include "jitembed/loader/detail/loader_state_epochs.hpp"
#include "jitembed/loader/detail/loader_state_requests.hpp"
#include "jitembed/loader/detail/loader_state_workers.hpp"
#include "jitembed/loader/detail/step_impl.hpp"
#include "jitembed/loader/jit_loader.hpp"

namespace jitembed::loader {

JITEMBED_DECL result<jit_loader> jit_loader::create(format::dataset data, client::jit_client client,
                                                    const loader_options& opts) {
  JITEMBED_ASSIGN_OR_RETURN(auto s, detail::loader_state::create(std::move(data), std::move(client), opts));
  return jit_loader(std::move(s));
}
JITEMBED_DECL jit_loader::jit_loader(std::unique_ptr<detail::loader_state> s) : state_(std::move(s)) {}
JITEMBED_DECL jit_loader::jit_loader(jit_loader&&) noexcept = default;
JITEMBED_DECL jit_loader& jit_loader::operator=(jit_loader&&) noexcept = default;
JITEMBED_DECL jit_loader::~jit_loader() = default;
JITEMBED_DECL result<std::optional<step>> jit_loader::next() { return state_->next(); }
JITEMBED_DECL byte_buffer jit_loader::state() const { return state_->state(); }
JITEMBED_DECL loader_stats jit_loader::stats() const { return state_->stats(); }
JITEMBED_DECL std::uint64_t jit_loader::epoch() const { return state_->epoch(); }
JITEMBED_DECL std::uint64_t jit_loader::steps_per_epoch() const { return state_->steps_per_epoch(); }
JITEMBED_DECL std::uint64_t jit_loader::samples_per_epoch() const { return state_->samples_per_epoch(); }
JITEMBED_DECL void jit_loader::close() {
  if (state_) state_->close();
}

}  // namespace jitembed::loader
