// loader_state's requests (members declared in loader_state.hpp): a chunk's cache lookups and embed requests,
// the client's completions (rows sliced, the cache filled, retryable failures resent), finishing samples.
#pragma once

#include "jitembed/loader/detail/loader_state.hpp"

namespace jitembed::loader::detail {

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
    std::lock_guard lock(mu_);
    count_locked(items.front().epoch, [&](loader_epoch_stats& c) {
      c.cache_hits += hits;
      c.cache_misses += misses;
    });
  }
  release(chunk);
}

inline void loader_state::submit(loader_request r) {
  const auto& g = groups_[r.group];
  const row_type& type = r.chunk->samples[r.rows.front()].types[r.group];  // the same for every row
  client::embed_request req;
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
    count_locked(r.chunk->samples[r.rows.front()].epoch, [&](loader_epoch_stats& c) {  // a chunk: one epoch's samples
      ++c.requests;
      c.rows_requested += req.rows.size();
      c.resubmits += r.attempt > 0 ? 1 : 0;
    });
    token = next_token_++;
    ++r.chunk->pending;
    ++outstanding_;
    live_.emplace(token, std::move(r));
  }
  const auto id = client_.embed(std::move(req),
                                [this, token](result<client::embed_result> res) { on_done(token, std::move(res)); });
  std::lock_guard lock(mu_);
  if (auto it = live_.find(token); it != live_.end()) it->second.id = id;
}

inline void loader_state::on_done(std::uint64_t token, result<client::embed_result> res) noexcept {
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
      const client::embed_result& r = *f.res;
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
        const auto& got = s.rows[g];
        const tensor* t = !spec.output.empty() ? find_tensor(got, spec.output) : got.empty() ? nullptr : &got[0].second;
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

}  // namespace jitembed::loader::detail
