// loader_state's workers (members declared in loader_state.hpp): admitting chunks in plan order, the work
// loop, and reading a sample's fields into the rows and cache keys of its groups.
#pragma once

#include "jitembed/loader/detail/loader_state.hpp"

namespace jitembed::loader::detail {

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
    const auto kind = groups_[g].kind;
    const format::sample_field* f = nullptr;
    if (!groups_[g].field.empty()) {
      f = s.src.find(groups_[g].field);
    } else {
      // An image model decodes JPEG: prefer the JPEG of a sample that also has, say, a PNG stored raw.
      if (kind == format::field_kind::image) f = s.src.first(kind, codec::codec_id::jpeg);
      if (!f) f = s.src.first(kind);
    }
    if (!f) continue;
    if (auto r = read_field(s, g, *f); !r) {
      s.out.error = fail(r.code(), "sample '" + s.src.id + "': " + r.error().message);
      return;
    }
    s.has[g] = 1;
  }
}

inline auto loader_state::read_field(chunk_sample& s, std::size_t g, const format::sample_field& f) -> result<void> {
  namespace ks = net::kserve;
  const auto& grp = groups_[g];
  const std::string what = "field '" + f.name + "'";
  row_type& t = s.types[g];
  if (f.kind != format::field_kind::tensor) {  // the model and the key see text as UTF-8, whatever its encoding
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

}  // namespace jitembed::loader::detail
