// loader_state's workers: admitting samples in plan order, reading and preprocessing them, answering from the
// cache, submitting requests to the client, and finishing samples and chunks as responses arrive.
// Included at the end of jitembed/client/detail/loader_state.hpp (users include that header).
#pragma once

#include "jitembed/client/detail/loader_state.hpp"

namespace jitembed::client::detail {

inline auto loader_state::take_locked(const epoch_plan& plan, std::uint64_t e, const std::vector<bool>* delivered, std::uint64_t& from) -> std::vector<admitted> {
  std::vector<admitted> out;
  const std::uint64_t count = plan.count();
  auto done = [&](std::uint64_t q) { return delivered && (*delivered)[static_cast<std::size_t>(q)]; };
  while (from < count && done(from)) ++from;
  if (from >= count) return out;
  std::size_t want = opts_.samples_per_request, left = 0;
  for (std::uint64_t q = from; q < count && left < want; ++q) left += done(q) ? 0 : 1;
  want = std::min(want, left);  // a full chunk unless the epoch has fewer left: wait for room instead
  if (opts_.max_buffered - buffered_ < want) return out;
  std::uint64_t p = from;
  for (; p < count && out.size() < want; ++p)
    if (!done(p)) out.push_back({e, p, plan.index(p)});
  from = p;
  buffered_ += out.size();
  max_buffered_seen_ = std::max<std::uint64_t>(max_buffered_seen_, buffered_);
  ++chunks_in_flight_;
  return out;
}

inline auto loader_state::admit_locked() -> std::vector<admitted> {
  if (chunks_in_flight_ >= opts_.requests_in_flight) return {};
  while (next_admit_ < delivered_.size() && delivered_[next_admit_]) ++next_admit_;
  if (next_admit_ < delivered_.size()) return take_locked(plan_, epoch_, &delivered_, next_admit_);
  if (!next_plan_) {
    // Only once the current epoch's chunks have all completed: their cache puts are done, so a warm
    // cache answers every lookup of the next epoch (none is sent twice because it was still in flight).
    if (chunks_in_flight_ != 0) return {};
    next_plan_ = make_plan(epoch_ + 1);
    next_epoch_ = epoch_ + 1;
    next_epoch_admit_ = 0;
  }
  return take_locked(*next_plan_, next_epoch_, nullptr, next_epoch_admit_);
}

inline void loader_state::work(std::stop_token stop) {
  // A failed start stops the workers already running: wake this one (under mu_, so the wake-up cannot fall
  // between its check and its wait). close() sets closed_ instead, which the next() waiters see too.
  std::stop_callback wake(stop, [this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
  std::unique_lock lock(mu_);
  while (!closed_ && !stop.stop_requested()) {
    if (!finished_.empty()) {
      auto f = std::move(finished_.front());
      finished_.pop_front();
      lock.unlock();
      on_finished(std::move(f));
      lock.lock();
      continue;
    }
    auto items = admit_locked();
    if (!items.empty()) {
      lock.unlock();
      run_chunk(items);
      lock.lock();
      continue;
    }
    cv_.wait(lock);
  }
}

inline void loader_state::read_sample(chunk_sample& s, std::uint64_t index) {
  const std::size_t ng = groups_.size();
  s.texts.resize(ng);
  s.content.resize(ng);
  s.has.assign(ng, 0);
  s.types.assign(ng, row_type{});
  s.decoded.resize(ng);
  s.keys.resize(ng);
  s.rows.resize(ng);
  s.errors.resize(ng);
  auto got = ds_.get(static_cast<std::size_t>(index));
  if (!got) {
    s.out.error = got.error();
    return;
  }
  s.src = std::move(*got);
  s.out.id = s.src.id;
  for (std::size_t g = 0; g < ng; ++g) {
    if (!groups_[g].field.empty()) {
      const auto* f = s.src.find(groups_[g].field);
      if (!f) continue;
      if (auto r = read_field(s, g, *f); !r) {
        s.out.error = fail(r.code(), "sample '" + s.src.id + "': " + r.error().message);
        return;
      }
      s.has[g] = 1;
      continue;
    }
    s.types[g].input = groups_[g].input;
    const auto kind = groups_[g].kind;
    // An image model decodes JPEG: prefer the JPEG of a sample that also has, say, a PNG stored raw.
    const auto* f = kind == format::field_kind::image ? s.src.first(kind, codec::codec_id::jpeg) : nullptr;
    if (!f) f = s.src.first(kind);
    if (!f) continue;
    if (groups_[g].kind == format::field_kind::text) {
      auto t = f->text(opts_.limits);  // the model and the key see UTF-8, whatever the stored encoding
      if (!t) {
        s.out.error = fail(t.code(), "sample '" + s.src.id + "': " + t.error().message);
        return;
      }
      s.texts[g] = std::move(*t);
      s.content[g] = as_bytes_view(s.texts[g]);
    } else {
      s.content[g] = f->bytes;
    }
    s.has[g] = 1;
    if (opts_.cache) {
      const auto& id = groups_[g].identity;
      s.keys[g] = cache::make_key({groups_[g].model, id.fingerprint, id.preprocess_key, s.content[g]});
    }
  }
}

inline auto loader_state::read_field(chunk_sample& s, std::size_t g, const format::sample_field& f) -> result<void> {
  namespace ks = net::kserve;
  const auto& grp = groups_[g];
  const std::string what = "field '" + f.name + "'";
  row_type& t = s.types[g];
  if (f.kind != format::field_kind::tensor) {
    if (f.kind == format::field_kind::text || f.kind == format::field_kind::json) {
      JITEMBED_ASSIGN_OR_RETURN(s.texts[g], f.text(opts_.limits));
      s.content[g] = as_bytes_view(s.texts[g]);
    } else {
      s.content[g] = f.bytes;
    }
    t.input = grp.input.empty() ? std::string(format::to_string(f.kind)) : grp.input;
    if (opts_.cache)
      s.keys[g] = cache::make_key({grp.model, grp.identity.fingerprint, grp.identity.preprocess_key, s.content[g]});
    return {};
  }
  // A tensor field: one typed row of its dtype and shape (token ids default to "input_ids").
  if (grp.input.empty() && f.dtype != dtype::i64 && f.dtype != dtype::i32)
    return fail(errc::invalid_argument,
                what + " is a " + std::string(to_string(f.dtype)) +
                    " tensor: its embedding needs an input name (only i64 / i32 ids default to 'input_ids')");
  t.input = grp.input.empty() ? std::string("input_ids") : grp.input;
  t.datatype = std::string(ks::to_string(ks::from_dtype(f.dtype)));
  t.shape.assign(f.shape.begin(), f.shape.end());
  JITEMBED_ASSIGN_OR_RETURN(const auto nbytes, checked_nbytes(t.shape, f.dtype));
  if (f.codec == codec::codec_id::raw) {
    s.content[g] = f.bytes;
  } else if (s.src.is_record() && &f >= s.src.fields.data() && &f < s.src.fields.data() + s.src.fields.size()) {
    // compressed in a record: decoded (the dataset's get() already checked its checksum as it was asked to)
    const auto i = static_cast<std::size_t>(&f - s.src.fields.data());
    JITEMBED_ASSIGN_OR_RETURN(s.decoded[g], s.src.record[i].decode(opts_.limits, format::checksum_policy::skip));
    s.content[g] = bytes_view(static_cast<const std::byte*>(s.decoded[g].data()), s.decoded[g].nbytes());
  } else {
    return fail(errc::unsupported_codec,
                what + ": a tensor stored with codec " + std::string(codec::to_string(f.codec)) + " outside a record");
  }
  if (s.content[g].size() != nbytes)
    return fail(errc::corrupt_data, what + ": " + std::to_string(s.content[g].size()) + " bytes for " +
                                        std::string(to_string(f.dtype)) + f.shape.to_string() + " (" +
                                        std::to_string(nbytes) + ")");
  if (opts_.cache) {
    // The ids and how they travel: the same bytes as another dtype, shape or input are another entry (and a
    // named-fields key never equals a field-content key).
    std::string shape_text;
    for (auto d : t.shape) shape_text += std::to_string(d) + ",";
    const cache::key_field parts[] = {{"tensor", s.content[g]},
                                      {"tensor.datatype", as_bytes_view(t.datatype)},
                                      {"tensor.input", as_bytes_view(t.input)},
                                      {"tensor.shape", as_bytes_view(shape_text)}};
    JITEMBED_ASSIGN_OR_RETURN(s.keys[g], cache::make_key(cache::fields_key_inputs{grp.model, grp.identity.fingerprint,
                                                                                  grp.identity.preprocess_key, parts}));
  }
  return {};
}

inline auto loader_state::from_cache(const loader_group& g, const cache::cached_value& v) const -> std::optional<named_tensors> {
  auto dec = cache::decode_value(v, opts_.limits);
  if (!dec) return std::nullopt;
  auto ts = dec->tensors();
  if (!ts || ts->empty()) return std::nullopt;
  for (const auto& o : g.outputs)
    if (std::none_of(ts->begin(), ts->end(), [&](const auto& p) { return p.first == o; })) return std::nullopt;
  return std::move(*ts);
}

inline void loader_state::run_chunk(const std::vector<admitted>& items) {
  auto chunk = std::make_shared<loader_chunk>();
  chunk->pending = 1;
  std::uint64_t hits = 0, misses = 0;  // this chunk's cache lookups, added to its epoch's stats below
  auto ran = core_detail::capture("jit_loader", [&] {
    chunk->samples.resize(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto& s = chunk->samples[i];
      s.epoch = items[i].epoch;
      s.pos = items[i].pos;
      s.out.index = items[i].index;
      if (auto r = core_detail::capture("jit_loader", [&] { read_sample(s, items[i].index); }); !r) s.out.error = r.error();
    }
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      std::vector<std::size_t> rows;
      for (std::size_t i = 0; i < chunk->samples.size(); ++i)
        if (!chunk->samples[i].out.error && chunk->samples[i].has[g]) rows.push_back(i);
      if (rows.empty()) continue;
      if (opts_.cache) {
        std::vector<cache::cache_key> keys;
        keys.reserve(rows.size());
        for (auto i : rows) keys.push_back(chunk->samples[i].keys[g]);
        auto got = opts_.cache.multi_get(keys);
        std::vector<std::size_t> miss;
        for (std::size_t k = 0; k < rows.size(); ++k) {
          std::optional<named_tensors> hit;
          if (k < got.size() && got[k]) hit = from_cache(groups_[g], *got[k]);
          if (hit) {
            chunk->samples[rows[k]].rows[g] = std::move(*hit);
            ++hits;
          } else {
            miss.push_back(rows[k]);
            ++misses;
          }
        }
        rows = std::move(miss);
      }
      // One request per row type (input, datatype, shape), in order of first appearance: one for BYTES rows.
      while (!rows.empty()) {
        const row_type& type = chunk->samples[rows.front()].types[g];
        loader_request r;
        r.chunk = chunk;
        r.group = g;
        std::vector<std::size_t> other;
        for (auto i : rows) (chunk->samples[i].types[g] == type ? r.rows : other).push_back(i);
        rows = std::move(other);
        submit(std::move(r));
      }
    }
  });
  if (!ran) {
    for (auto& s : chunk->samples)
      if (!s.out.error) s.out.error = ran.error();
  }
  if ((hits || misses) && !items.empty()) {
    std::lock_guard lock(mu_);  // the totals and the epoch's share together: stats() sees them agree
    cache_hits_ += hits;
    cache_misses_ += misses;
    auto& es = epoch_stats_locked(items.front().epoch).s;
    es.cache_hits += hits;
    es.cache_misses += misses;
  }
  release(chunk);
}

inline void loader_state::submit(loader_request r) {
  const auto& g = groups_[r.group];
  const row_type& type = r.chunk->samples[r.rows.front()].types[r.group];  // the same for every row
  embed_request req;
  req.model = g.model;
  req.input = type.input;
  req.datatype = type.datatype;
  req.row_shape = type.shape;
  req.outputs = g.outputs;
  req.timeout = opts_.request_timeout;
  req.rows.reserve(r.rows.size());
  for (auto i : r.rows) req.rows.push_back(r.chunk->samples[i].content[r.group]);
  std::uint64_t token = 0;
  {
    std::lock_guard lock(mu_);
    auto& es = epoch_stats_locked(r.chunk->samples[r.rows.front()].epoch).s;  // a chunk holds one epoch's samples
    ++es.requests;
    es.rows_requested += req.rows.size();
    if (r.attempt > 0) ++es.resubmits;
    ++requests_;
    rows_requested_ += req.rows.size();
    token = next_token_++;
    ++r.chunk->pending;
    ++outstanding_;
    live_.emplace(token, std::move(r));
  }
  const auto id = client_->embed(std::move(req), [this, token](result<embed_result> res) { on_done(token, std::move(res)); });
  std::lock_guard lock(mu_);
  if (auto it = live_.find(token); it != live_.end()) it->second.id = id;
}

inline void loader_state::on_done(std::uint64_t token, result<embed_result> res) noexcept {
  try {
    std::lock_guard lock(mu_);
    auto it = live_.find(token);
    if (it == live_.end()) return;
    finished_.push_back({std::move(it->second), std::move(res)});
    live_.erase(it);
    --outstanding_;
    cv_.notify_all();
  } catch (...) {  // bad_alloc in push_back: nothing sensible left; the loader's close() still ends
  }
}

inline void loader_state::on_finished(finished_request f) {
  auto& req = f.req;
  auto& chunk = *req.chunk;
  const auto& g = groups_[req.group];
  std::vector<std::size_t> again;
  auto failed_row = [&](std::size_t i, const error_info& e) {
    if (is_retryable(e.code) && req.attempt < opts_.resubmits) {
      again.push_back(i);
      return;
    }
    chunk.samples[i].errors[req.group] = fail(
        e.code, "model '" + g.model + "'" + (g.field.empty() ? "" : ", field '" + g.field + "'") + ": " + e.message);
  };
  auto ran = core_detail::capture("jit_loader", [&] {
    if (!f.res) {
      for (auto i : req.rows) failed_row(i, f.res.error());
    } else {
      const embed_result& r = *f.res;
      const std::size_t n = req.rows.size();
      std::optional<error_info> bad;
      if (!r.row_errors.empty() && r.row_errors.size() != n)
        bad = fail(errc::internal, std::to_string(r.row_errors.size()) + " row errors for " + std::to_string(n) + " rows");
      for (const auto& [name, t] : r.outputs) {
        if (bad) break;
        if (!t.device().is_cpu() || !t.is_contiguous() || t.rank() == 0 || t.size(0) != static_cast<std::int64_t>(n))
          bad = fail(errc::internal, "output '" + name + "' of shape " + t.shape().to_string() + " for " + std::to_string(n) + " rows");
      }
      // Every row failed on its own (a local model or a row-by-row resend answers so without outputs): each
      // row gets its own error below, not "no outputs".
      bool all_rows_failed = !r.row_errors.empty();
      for (std::size_t k = 0; all_rows_failed && k < n; ++k) all_rows_failed = !r.row_ok(k);
      if (!bad && r.outputs.empty() && !all_rows_failed) bad = fail(errc::internal, "no outputs");
      if (bad) {
        for (auto i : req.rows) chunk.samples[i].errors[req.group] = fail(bad->code, "model '" + g.model + "': " + bad->message);
      } else {
        for (std::size_t k = 0; k < n; ++k) {
          const std::size_t i = req.rows[k];
          if (!r.row_ok(k)) {
            failed_row(i, r.row_errors[k]);
            continue;
          }
          named_tensors row;
          row.reserve(r.outputs.size());
          for (const auto& [name, t] : r.outputs) {
            jitembed::shape s;
            for (std::size_t d = 1; d < t.rank(); ++d) s.push_back(t.size(d));
            const std::size_t row_bytes = t.nbytes() / n;
            auto* p = static_cast<std::byte*>(t.data()) + k * row_bytes;
            tensor_view v(static_cast<void*>(p), t.dtype(), s);
            if (t.owner()) row.emplace_back(name, tensor::wrap(t.owner(), v));
            else row.emplace_back(name, tensor::copy_of(v.bytes(), v.dtype(), v.shape()));  // nothing to share
          }
          if (opts_.cache) fill_cache(chunk.samples[i].keys[req.group], row);
          chunk.samples[i].rows[req.group] = std::move(row);
        }
      }
    }
    if (!again.empty()) {
      loader_request r2;
      r2.chunk = req.chunk;
      r2.group = req.group;
      r2.rows = std::move(again);
      r2.attempt = req.attempt + 1;
      ++resubmits_;
      submit(std::move(r2));
    }
  });
  if (!ran) {
    for (auto i : req.rows)
      if (!chunk.samples[i].errors[req.group]) chunk.samples[i].errors[req.group] = ran.error();
  }
  release(req.chunk);
}

inline void loader_state::fill_cache(const cache::cache_key& key, const named_tensors& row) {
  std::vector<cache::named_tensor> named;
  named.reserve(row.size());
  for (const auto& [n, t] : row) named.emplace_back(n, t.view());
  auto v = cache::encode_value(named, opts_.cache_values);
  if (v && opts_.cache.put(key, *v)) ++cache_puts_;
  else ++cache_put_failures_;
}

inline void loader_state::release(const std::shared_ptr<loader_chunk>& chunk) {
  {
    std::lock_guard lock(mu_);
    if (--chunk->pending != 0) return;
  }
  for (auto& s : chunk->samples) finish_sample(s);
  std::lock_guard lock(mu_);
  for (auto& s : chunk->samples) {
    if (s.epoch == epoch_) ++ready_current_;
    ready_.emplace(std::pair{s.epoch, s.pos}, std::move(s.out));
  }
  --chunks_in_flight_;
  cv_.notify_all();
}

inline void loader_state::finish_sample(chunk_sample& s) {
  if (!s.out.error) {
    for (std::size_t g = 0; g < groups_.size() && !s.out.error; ++g) {
      if (!s.has[g]) continue;
      if (s.errors[g]) {
        s.out.error = fail(s.errors[g]->code, "sample '" + s.out.id + "': " + s.errors[g]->message);
        break;
      }
      for (auto i : groups_[g].specs) {
        const auto& spec = opts_.embeddings[i];
        const tensor* t = nullptr;
        if (spec.output.empty()) {
          if (!s.rows[g].empty()) t = &s.rows[g].front().second;
        } else {
          for (const auto& [n, v] : s.rows[g])
            if (n == spec.output) t = &v;
        }
        if (!t) {
          s.out.error = fail(errc::not_found, "sample '" + s.out.id + "': model '" + groups_[g].model + "' gave no output '" +
                                                  (spec.output.empty() ? std::string("(first)") : spec.output) + "'");
          break;
        }
        s.out.embeddings.emplace_back(spec.name, *t);
      }
    }
  }
  if (s.out.error) s.out.embeddings.clear();
  s.src = {};
  s.decoded.clear();
  s.texts.clear();
  s.rows.clear();
}

}  // namespace jitembed::client::detail
