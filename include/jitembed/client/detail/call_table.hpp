// The client's calls and their attempts, and the call table: ids, the calls in flight, coalescing, the calls
// waiting for an endpoint or a connection, deadlines. No I/O: called with the engine's lock held.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/client/detail/endpoint_set.hpp"
#include "jitembed/client/detail/executor.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/net/kserve/encode.hpp"

namespace jitembed::client::detail {

// Functions to run after the engine's lock is released (user callbacks), where it goes out of scope (an I/O
// thread); with `post_to` set (a caller's thread: embed(), cancel()) posted to the executor instead.
struct deferred {
  std::vector<std::function<void()>> fns;
  client_executor* post_to = nullptr;
  deferred() = default;
  explicit deferred(client_executor* e) : post_to(e) {}
  deferred(const deferred&) = delete;
  ~deferred() {
    for (auto& f : fns) {
      if (post_to) {
        post_to->post([f = std::move(f)] { run(f); });
      } else {
        run(f);
      }
    }
  }
  static void run(const std::function<void()>& f) {
    try {
      f();
    } catch (...) {  // a throwing user callback is its bug; the client keeps going (docs/api.md rule 1.4)
    }
  }
};

struct remote_call;

struct remote_attempt {
  std::shared_ptr<remote_call> call;
  endpoint_ptr ep;
  bool hedge = false;
  bool probe = false;  // the half-open probe of its endpoint
  bool finished = false;
  clock::time_point start;
  std::shared_ptr<void> io;    // its transport's state: an HTTP connection and message, a gRPC call, a local task
  std::optional<shm_use> shm;  // its rows and outputs go through the endpoint's shared memory
};

using attempt_ptr = std::shared_ptr<remote_attempt>;

struct remote_call {
  std::uint64_t id = 0;
  std::string model, version, input;
  std::vector<std::string> outputs;
  net::kserve::datatype type = net::kserve::datatype::bytes;
  std::vector<std::int64_t> row_shape;  // typed rows: one row's dims (the input is [N, row_shape...])
  std::shared_ptr<byte_buffer> rows;    // BYTES elements (uint32-LE length + bytes), N of them; typed: N rows
  std::optional<std::shared_ptr<const byte_buffer>>
      packed_rows;                                             // compress_inputs: the rows compressed once (null: raw)
  std::vector<std::pair<std::size_t, std::size_t>> row_spans;  // element payload offset and size
  std::size_t n_rows = 0;
  clock::time_point start, deadline;
  std::vector<embed_callback> callbacks;
  std::optional<hash128> coalesce_key;
  bool done = false;
  bool internal = false;  // a row of a split request (no id, no coalescing)
  bool no_shm = false;    // a shared-memory attempt was refused: the socket only
  int attempts = 0, retries = 0;
  bool hedged = false;
  std::vector<attempt_ptr> active;
  std::set<const endpoint_state*> tried;
  error_info last_error{errc::unavailable, "no attempt made"};
  std::shared_ptr<scheduled> retry_timer, hedge_timer;
  std::vector<std::shared_ptr<remote_call>> children;  // row split

  bytes_view row(std::size_t i) const { return bytes_view(rows->data() + row_spans[i].first, row_spans[i].second); }
  bool typed() const noexcept { return type != net::kserve::datatype::bytes; }
  // The input's shape: [N, 1] for BYTES rows, [N, row_shape...] for typed ones.
  std::vector<std::int64_t> input_shape() const {
    std::vector<std::int64_t> s{static_cast<std::int64_t>(n_rows)};
    if (!typed()) s.push_back(1);
    s.insert(s.end(), row_shape.begin(), row_shape.end());
    return s;
  }
};

using call_ptr = std::shared_ptr<remote_call>;

class call_table {
 public:
  std::uint64_t next_id() noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }

  // Checks a request's datatype and, for typed rows, every row's size (product(row_shape) elements), before
  // anything is sent or joined; returns the row size (0 for BYTES). A typed request's coalescing key is
  // mixed with its datatype and row shape: the same bytes as INT32 [4] and as INT64 [2] never coalesce.
  static result<std::size_t> check_rows(embed_request& req) {
    namespace ks = net::kserve;
    const auto type = ks::datatype_from_string(req.datatype);
    if (!type) return fail(errc::invalid_argument, "embed: unknown datatype '" + req.datatype + "'");
    std::string dims;
    for (auto d : req.row_shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    if (*type == ks::datatype::bytes) {
      if (!req.row_shape.empty())
        return fail(errc::invalid_argument,
                    "embed: row_shape [" + dims + "] given for BYTES rows (each row is one element)");
      return std::size_t{0};
    }
    auto numel = checked_numel(req.row_shape);
    if (!numel) return fail(numel.code(), "embed: row_shape [" + dims + "]: " + numel.error().message);
    const std::size_t row_bytes = static_cast<std::size_t>(*numel) * ks::element_size(*type);
    for (std::size_t i = 0; i < req.rows.size(); ++i)
      if (req.rows[i].size() != row_bytes)
        return fail(errc::invalid_argument, "embed: row " + std::to_string(i) + " has " +
                                                std::to_string(req.rows[i].size()) + " bytes, " + req.datatype + " [" +
                                                dims + "] needs " + std::to_string(row_bytes));
    if (req.coalesce_key) {
      hasher128 h;
      h.update(bytes_view(reinterpret_cast<const std::byte*>(&*req.coalesce_key), sizeof(hash128)));
      h.update(as_bytes_view(req.datatype + "[" + dims + "]"));
      req.coalesce_key = h.digest();
    }
    return row_bytes;
  }

  // A call for `req`, checked by check_rows (row_bytes: its answer): BYTES rows encoded once as KServe BYTES
  // elements, typed rows back to back; every transport reads that buffer.
  static result<call_ptr> make(std::uint64_t id, embed_request& req, clock::duration default_timeout,
                               std::size_t row_bytes = 0) {
    auto c = std::make_shared<remote_call>();
    c->id = id;
    c->model = std::move(req.model);
    c->version = std::move(req.version);
    c->input = std::move(req.input);
    c->outputs = std::move(req.outputs);
    c->n_rows = req.rows.size();
    c->type = net::kserve::datatype_from_string(req.datatype).value_or(net::kserve::datatype::bytes);
    c->row_shape = std::move(req.row_shape);
    if (c->typed()) {
      c->rows = std::make_shared<byte_buffer>(row_bytes * req.rows.size());
      for (std::size_t i = 0; i < req.rows.size(); ++i) {
        if (row_bytes) std::memcpy(c->rows->data() + i * row_bytes, req.rows[i].data(), row_bytes);
        c->row_spans.emplace_back(i * row_bytes, row_bytes);
      }
    } else {
      std::vector<std::string_view> views;
      views.reserve(req.rows.size());
      for (auto r : req.rows) views.emplace_back(reinterpret_cast<const char*>(r.data()), r.size());
      auto rows = net::kserve::encode_bytes_elements(views);
      if (!rows) return rows.error();
      c->rows = std::make_shared<byte_buffer>(std::move(*rows));
      std::size_t off = 0;
      for (auto r : req.rows) {
        c->row_spans.emplace_back(off + 4, r.size());
        off += 4 + r.size();
      }
    }
    c->start = clock::now();
    c->deadline =
        c->start + (req.timeout ? std::chrono::duration_cast<clock::duration>(*req.timeout) : default_timeout);
    c->coalesce_key = req.coalesce_key;
    return c;
  }

  // Row i of a split call alone, with the parent's deadline.
  static call_ptr make_row(const remote_call& parent, std::size_t i) {
    embed_request req{parent.model, parent.version, parent.input, {parent.row(i)}, parent.outputs};
    req.datatype = std::string(net::kserve::to_string(parent.type));
    req.row_shape = parent.row_shape;
    auto child = std::move(make(0, req, clock::duration{}, parent.row(i).size())).value();
    child->internal = true;
    child->deadline = parent.deadline;
    return child;
  }

  // A split call's answer from its rows' answers: each row's outputs at its place, a failed row's error in
  // row_errors (its outputs zeros).
  static result<embed_result> assemble(const remote_call& c, std::vector<std::optional<result<embed_result>>>& rows) {
    embed_result out;
    out.model_name = c.model;
    out.row_errors.resize(c.n_rows);
    if (const auto hit = std::find_if(rows.begin(), rows.end(), [](const auto& r) { return r && *r; });
        hit != rows.end()) {
      const embed_result& first = ***hit;  // optional, result, value
      out.model_name = first.model_name;
      out.model_version = first.model_version;
      out.endpoint = first.endpoint;
      for (const auto& [name, t] : first.outputs) {
        shape s = t.shape();
        s[0] = static_cast<std::int64_t>(c.n_rows);
        out.outputs.emplace_back(name, tensor::zeros(s, t.dtype()));
      }
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto& r = *rows[i];
      if (!r) {
        out.row_errors[i] = r.error();
        continue;
      }
      out.attempts += r->attempts;
      for (auto& [name, dst] : out.outputs) {
        const tensor* src = r->find(name);
        if (!src || src->nbytes() * c.n_rows != dst.nbytes()) {
          out.row_errors[i] = fail(errc::corrupt_data, "row " + std::to_string(i) + ": output '" + name + "' differs");
          continue;
        }
        std::memcpy(static_cast<std::byte*>(dst.data()) + i * src->nbytes(), src->data(), src->nbytes());
      }
    }
    return out;
  }

  static error_info deadline_error(const remote_call& c) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - c.start).count();
    std::string m =
        "deadline of " + std::to_string(ms) + " ms passed after " + std::to_string(c.attempts) + " attempt(s)";
    if (c.last_error.code != errc::ok && c.attempts > 0) m += "; last: " + c.last_error.message;
    return fail(errc::timeout, std::move(m));
  }

  std::size_t size() const noexcept { return calls_.size(); }

  // The unfinished call that a request with `key` joins instead of going out again (coalescing).
  call_ptr joinable(const hash128& key) const {
    const auto it = coalesce_.find(key);
    return it != coalesce_.end() && !it->second->done ? it->second : nullptr;
  }

  void add(const call_ptr& c) {
    calls_.emplace(c->id, c);
    if (c->coalesce_key) coalesce_[*c->coalesce_key] = c;
  }

  // A finished call leaves the table (and its coalescing entry, if still its own).
  void remove(const remote_call& c) {
    calls_.erase(c.id);
    if (c.coalesce_key)
      if (auto it = coalesce_.find(*c.coalesce_key); it != coalesce_.end() && it->second.get() == &c)
        coalesce_.erase(it);
  }

  call_ptr find(std::uint64_t id) const {
    const auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second;
  }

  std::vector<call_ptr> open() const {
    std::vector<call_ptr> out;
    out.reserve(calls_.size());
    for (const auto& [id, c] : calls_) out.push_back(c);
    return out;
  }

  // A call that found no free connection: resumed by take_waiting() when one frees up or the set changes.
  void wait(call_ptr c) { waiting_.push_back(std::move(c)); }
  std::vector<call_ptr> take_waiting() { return std::exchange(waiting_, {}); }

 private:
  std::atomic<std::uint64_t> next_{1};
  std::unordered_map<std::uint64_t, call_ptr> calls_;
  std::unordered_map<hash128, call_ptr> coalesce_;
  std::vector<call_ptr> waiting_;
};

}  // namespace jitembed::client::detail
