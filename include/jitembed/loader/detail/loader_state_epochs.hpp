// loader_state's setup and epochs (members declared in loader_state.hpp): option checks, model groups, the
// readiness wait, the verdict on a step, starting an epoch's plan and restoring from a checkpoint.
#pragma once

#include "jitembed/loader/detail/loader_state.hpp"

namespace jitembed::loader::detail {

inline auto loader_state::check(const loader_options& o) -> result<void> {
  auto bad = [](const std::string& m) { return fail(errc::invalid_argument, "jit_loader: " + m); };
  if (o.embeddings.empty()) return bad("no embeddings");
  for (std::size_t i = 0; i < o.embeddings.size(); ++i) {
    const auto& e = o.embeddings[i];
    if (e.name.empty()) return bad("embedding " + std::to_string(i) + " has no name");
    if (e.model.empty()) return bad("embedding '" + e.name + "' has no model");
    if (e.kind != models::modality::image && e.kind != models::modality::video && e.kind != models::modality::text)
      return bad("embedding '" + e.name + "': kind " + std::to_string(static_cast<int>(e.kind)) + " is not image, video or text");
    for (std::size_t k = 0; k < i; ++k)
      if (o.embeddings[k].name == e.name) return bad("embedding name '" + e.name + "' given twice");
  }
  if (o.batch_size == 0) return bad("batch_size 0");
  if (o.samples_per_request == 0) return bad("samples_per_request 0");
  if (o.requests_in_flight == 0) return bad("requests_in_flight 0");
  if (o.workers == 0) return bad("workers 0");
  if (o.world_size == 0) return bad("world_size 0");
  if (o.rank >= o.world_size) return bad("rank " + std::to_string(o.rank) + " not in [0, " + std::to_string(o.world_size) + ")");
  if (o.max_buffered < o.batch_size || o.max_buffered < o.samples_per_request)
    return bad("max_buffered " + std::to_string(o.max_buffered) + " < batch_size " + std::to_string(o.batch_size) +
               " or samples_per_request " + std::to_string(o.samples_per_request));
  if (o.resubmits < 0) return bad("resubmits < 0");
  if (o.request_timeout && o.request_timeout->count() <= 0) return bad("request_timeout <= 0");
  if (!(o.max_failed_fraction >= 0.0)) return bad("max_failed_fraction " + std::to_string(o.max_failed_fraction) + " < 0");
  if (o.ready_timeout && o.ready_timeout->count() <= 0) return bad("ready_timeout <= 0");
  return {};
}

inline auto loader_state::wait_ready() -> result<void> {
  auto timeout = opts_.ready_timeout;
  if (!timeout && opts_.fail_fast) timeout = loader_options::kDefaultFailFastReadyTimeout;
  if (!timeout) return {};
  std::vector<std::string> models;
  for (const auto& e : opts_.embeddings)
    if (std::find(models.begin(), models.end(), e.model) == models.end()) models.push_back(e.model);
  auto r = client_.wait_ready(models, *timeout);
  if (!r) return fail(r.error().code, "jit_loader: " + r.error().message);
  return {};
}

inline auto loader_state::step_error(const step& b, std::uint64_t failed) const -> std::optional<error_info> {
  // Bad input fails one sample (a corrupt JPEG); anything else is the service's or the setup's trouble.
  auto service = [](const embedded_sample& s) { return !s.ok() && caller_action(s.error->code) != caller_move::fix_input; };
  const embedded_sample* first = nullptr;
  std::uint64_t service_failed = 0;
  for (const auto& s : b.samples) {
    if (service(s)) {
      ++service_failed;
      if (!first) first = &s;
    }
  }
  const double n = static_cast<double>(b.samples.size());
  std::string why;
  if (opts_.fail_fast) {
    why = "fail_fast";
    if (!first) first = &*std::find_if(b.samples.begin(), b.samples.end(), [](const auto& s) { return !s.ok(); });
  } else if (service_failed != 0 && static_cast<double>(service_failed) >= opts_.max_failed_fraction * n) {
    std::ostringstream f;
    f << opts_.max_failed_fraction;
    why = "max_failed_fraction " + f.str();
  } else {
    return std::nullopt;
  }
  std::string where;
  for (const auto& u : client_.endpoints()) where += (where.empty() ? "" : ", ") + u;
  if (client_.local()) where = "local models";
  return fail(first->error->code, "jit_loader: step " + std::to_string(b.index) + " of epoch " + std::to_string(b.epoch) + ": " +
                                      std::to_string(failed) + " of " + std::to_string(b.samples.size()) + " samples failed (" + why +
                                      "); endpoints: " + (where.empty() ? std::string("none") : where) +
                                      "; first error: " + first->error->message);
}

inline auto loader_state::make_groups() -> result<void> {
  for (std::size_t i = 0; i < opts_.embeddings.size(); ++i) {
    const auto& e = opts_.embeddings[i];
    const auto kind = models::field_kind_of(e.kind);
    // A named field's input may depend on the field (loader_state::read_field): kept as given.
    const std::string input = e.input.empty() && e.field.empty() ? std::string(format::to_string(kind)) : e.input;
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const loader_group& g) {
      return g.model == e.model && g.field == e.field && (!e.field.empty() || g.kind == kind);
    });
    if (it == groups_.end()) {
      loader_group g;
      g.model = e.model;
      g.kind = kind;
      g.field = e.field;
      g.input = input;
      groups_.push_back(std::move(g));
      it = groups_.end() - 1;
    } else if (it->input != input) {
      return fail(errc::invalid_argument, "jit_loader: embedding '" + e.name + "': input '" + input + "' differs from '" + it->input +
                                              "' of another embedding of model '" + e.model + "'");
    }
    it->specs.push_back(i);
  }
  for (auto& g : groups_) {
    bool all = false;
    for (auto i : g.specs) {
      const auto& out = opts_.embeddings[i].output;
      if (out.empty()) all = true;
      else if (std::find(g.outputs.begin(), g.outputs.end(), out) == g.outputs.end()) g.outputs.push_back(out);
    }
    if (all) g.outputs.clear();
    if (opts_.cache) {
      auto id = client_.identity(g.model);
      if (!id) return fail(id.code(), "jit_loader: identity of model '" + g.model + "': " + id.error().message);
      g.identity = std::move(*id);
    }
  }
  return {};
}

inline auto loader_state::start_epoch(std::uint64_t e) -> result<void> {
  std::lock_guard lock(mu_);
  start_epoch_locked(e);
  return {};
}

inline void loader_state::start_epoch_locked(std::uint64_t e) {
  epoch_ = e;
  if (next_plan_ && next_epoch_ == e) {  // admission already went into this epoch
    plan_ = std::move(*next_plan_);
    next_admit_ = next_epoch_admit_;
  } else {
    plan_ = make_plan(e);
    next_admit_ = 0;
  }
  next_plan_.reset();
  next_epoch_admit_ = 0;
  delivered_.assign(static_cast<std::size_t>(plan_.count()), false);
  steps_done_ = 0;
  head_ = 0;
  ready_current_ = 0;
  for (const auto& [key, v] : ready_)
    if (key.first == e) ++ready_current_;
}

inline auto loader_state::make_plan(std::uint64_t e) const -> epoch_plan {
  return epoch_plan::make(ds_.size(), opts_.world_size, opts_.rank, opts_.batch_size, opts_.seed, e, opts_.shuffle);
}

inline auto loader_state::restore(bytes_view bytes) -> result<void> {
  auto c = loader_checkpoint::parse(bytes);
  if (!c) return c.error();
  auto mismatch = [](const char* what, std::uint64_t have, std::uint64_t want) {
    return fail(errc::invalid_argument, std::string("jit_loader: resume state is for ") + what + " " + std::to_string(have) +
                                            ", this loader has " + std::to_string(want));
  };
  if (c->n != ds_.size()) return mismatch("a data set of size", c->n, ds_.size());
  if (c->world != opts_.world_size) return mismatch("world_size", c->world, opts_.world_size);
  if (c->rank != opts_.rank) return mismatch("rank", c->rank, opts_.rank);
  if (c->batch != opts_.batch_size) return mismatch("batch_size", c->batch, opts_.batch_size);
  if (c->seed != opts_.seed) return mismatch("seed", c->seed, opts_.seed);
  if (c->shuffle != opts_.shuffle) return mismatch("shuffle", c->shuffle, opts_.shuffle);
  std::lock_guard lock(mu_);
  start_epoch_locked(c->epoch);
  if (c->delivered.size() != delivered_.size())
    return fail(errc::corrupt_data, "jit_loader: resume state has " + std::to_string(c->delivered.size()) + " positions, the plan " +
                                        std::to_string(delivered_.size()));
  if (c->steps_done > plan_.steps()) return fail(errc::corrupt_data, "jit_loader: resume state past the epoch's last step");
  std::uint64_t want = 0, have = 0;
  for (std::uint64_t k = 0; k < c->steps_done; ++k) want += plan_.step_size(k);
  for (bool d : c->delivered) have += d ? 1 : 0;
  if (want != have)
    return fail(errc::corrupt_data, "jit_loader: resume state marks " + std::to_string(have) + " samples delivered, its " +
                                        std::to_string(c->steps_done) + " steps hold " + std::to_string(want));
  delivered_ = std::move(c->delivered);
  steps_done_ = c->steps_done;
  return {};
}

}  // namespace jitembed::loader::detail
