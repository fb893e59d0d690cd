// The service's protocol-neutral inference pipeline: admission, preprocessing, the dynamic batcher, shared-memory
// inputs and outputs, the stacked KServe response. A front end decodes the request and encodes the answer.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jitembed/codec/zstd_wire.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/thread_pool.hpp"
#include "jitembed/models/preprocess_input.hpp"
#include "jitembed/net/kserve/compression.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/encode.hpp"
#include "jitembed/net/kserve/status.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/detail/deadline_timer.hpp"
#include "jitembed/server/detail/registry.hpp"
#include "jitembed/server/detail/request_rows.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/shm/detail/transfer.hpp"

namespace jitembed::server::detail {

inline error_info as_error(const net::kserve::protocol_error& e) { return fail(e.code, e.message); }

inline std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// A request decoded once it is admitted (admission comes before any work, decoding included): its tensors
// view into bytes that `storage` keeps valid.
struct decoded_request {
  net::kserve::infer_request req;
  jitembed::keep_alive storage;
};
using request_decoder = std::function<result<decoded_request>()>;

// The answer: the KServe response, its outputs owning their stacked bytes. A front end encodes it (HTTP:
// JSON header + binary pieces, net::kserve::encode_response; gRPC: a ModelInferResponse).
using infer_output = std::shared_ptr<const net::kserve::infer_response>;

// Called once per request, on a pool or batcher thread (or the caller's, for an answer at once).
using infer_completion = std::function<void(result<infer_output>)>;

// Thread-safe. The registry (and the shared-memory registry) must outlive the pipeline; the pool's threads
// stop in the destructor.
class inference_pipeline {
 public:
  using clock = std::chrono::steady_clock;

  // `shm`: the shared-memory regions requests may name (Triton's system and CUDA extensions); without
  // it a request naming a region is answered invalid_argument.
  inference_pipeline(model_registry& registry, const server_config& cfg, const shared_memory_registry* shm = nullptr)
      : registry_(registry),
        config_(cfg),
        shm_(shm),
        timer_([this](std::shared_ptr<infer_call> call) { expire(*call); }),
        pool_(cfg.preprocess_threads ? cfg.preprocess_threads : std::max(1u, std::thread::hardware_concurrency())) {}
  inference_pipeline(const inference_pipeline&) = delete;
  inference_pipeline& operator=(const inference_pipeline&) = delete;

  // Runs one request to model `name` (version; empty: the highest loaded) that `decode` decodes once admitted
  // (its errors are the request's). Errors: unavailable (draining, admission bound reached), not_found (model
  // or version), the decoder's and the model's errors, timeout (the request's KServe "timeout" passed).
  // Never blocks on model work.
  void infer(std::string_view name, std::string_view version, const request_decoder& decode, infer_completion done) {
    auto call = admit(name, version, done);
    if (!call) return;
    auto decoded = decode();
    if (!decoded) return finish_error(*call, decoded.error());
    start(std::move(call), std::move(decoded->req), std::move(decoded->storage));
  }

  // Runs one request a front end decoded itself (a gRPC front end from its protobuf): `req`'s tensors view
  // into bytes that `storage` keeps valid until `done` is called. Errors: as above.
  void infer(std::string name, std::string version, net::kserve::infer_request req, jitembed::keep_alive storage,
             infer_completion done) {
    if (auto call = admit(name, version, done)) start(std::move(call), std::move(req), std::move(storage));
  }

  // What a request gets while the service drains.
  static error_info not_ready() {
    return as_error(net::kserve::unavailable(net::kserve::unavailable_reason::not_ready, "shutting down"));
  }

 private:
  // State shared by the rows of one inference request.
  struct infer_call {
    std::shared_ptr<model_instance> inst;
    inference_pipeline* owner = nullptr;
    jitembed::keep_alive storage;                   // the request's bytes
    net::kserve::infer_request req;                 // views into `storage` (or copies from shared memory)
    std::vector<shared_memory_output> shm_outputs;  // outputs that go to a region, the regions held
    infer_completion done;
    clock::time_point start;
    std::optional<clock::time_point> deadline;  // the request's KServe "timeout", counted from its arrival
    std::size_t admitted = 0;                   // rows counted against the instance's max_inflight_rows
    std::vector<models::named_tensors> rows;
    std::atomic<std::size_t> remaining{0};
    std::atomic<bool> answered{false};  // done was called (by finish, finish_error or expire): once only
    std::mutex err_mu;
    std::optional<error_info> first_error;

    void row_done(std::size_t i, result<models::named_tensors> r) {
      if (r) {
        rows[i] = std::move(*r);
      } else {
        std::lock_guard lock(err_mu);
        if (!first_error) first_error = std::move(r).error();
      }
      if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) owner->finish(*this);
    }
  };

  // The call for a request to name / version, admitted (counted active and against max_inflight_rows);
  // nullptr when `done` was already called (draining, unknown model, admission bound reached).
  std::shared_ptr<infer_call> admit(std::string_view name, std::string_view version, infer_completion& done) {
    const auto start = clock::now();
    if (!registry_.ready()) {
      done(not_ready());
      return nullptr;
    }
    auto found = registry_.find(name, version, /*acquire=*/true);
    if (!found) {
      done(registry_.ready() ? as_error(net::kserve::model_not_found(name, version)) : not_ready());
      return nullptr;
    }
    auto inst = std::move(*found);
    // Admission, before any work (decoding included): past max_inflight_rows the answer is 503 at once.
    if (!inst->try_admit()) {
      inst->counters().rejected_admission.fetch_add(1, std::memory_order_relaxed);
      inst->counters().failure.fetch_add(1, std::memory_order_relaxed);
      done(fail(errc::unavailable, "model '" + inst->name() + "' version " + inst->version() +
                                       " is at max_inflight_rows " + std::to_string(inst->max_inflight_rows())));
      registry_.release(*inst);
      return nullptr;
    }
    auto call = std::make_shared<infer_call>();
    call->inst = std::move(inst);
    call->owner = this;
    call->done = std::move(done);
    call->start = start;
    call->admitted = 1;
    return call;
  }

  // Checks the decoded request, then preprocesses its rows on the pool (raw fields) or takes them as they are
  // (tensor inputs), and submits them to the batcher.
  void start(std::shared_ptr<infer_call> call, net::kserve::infer_request req, jitembed::keep_alive storage) {
    call->req = std::move(req);
    call->storage = std::move(storage);
    if (auto shm = resolve_shared_memory(*call); !shm) return finish_error(*call, shm.error());
    if (auto raw = decompress_inputs(*call); !raw) return finish_error(*call, raw.error());
    auto rows = row_checker{*call->inst, call->req, config_.max_rows_per_request}.check();
    if (!rows) return finish_error(*call, rows.error());
    const std::size_t n = rows->count();
    call->inst->admit_more(n - 1);
    call->admitted = n;
    call->rows.resize(n);
    call->remaining.store(n, std::memory_order_relaxed);
    if (const auto timeout = net::kserve::timeout_us(call->req); timeout && *timeout > 0)
      call->deadline = call->start + std::chrono::microseconds(
                                         static_cast<std::int64_t>(std::min<std::uint64_t>(*timeout, 1ull << 40)));
    // Answered `timeout` at the deadline even when the model is still running its rows (a model cannot be
    // interrupted; its instance reports not ready until it returns: model_instance::ready).
    if (call->deadline) timer_.arm(*call->deadline, call);
    if (!rows->items.empty()) {  // tensor inputs: nothing to decode, straight to the batcher
      for (std::size_t i = 0; i < n; ++i) submit_row(call, i, std::move(rows->items[i]));
      return;
    }
    const bool is_sample = call->req.inputs.front().name == "sample";
    for (std::size_t i = 0; i < n; ++i) {
      pool_.submit([this, call, i, raw = rows->raw[i], is_sample] {
        // A row whose deadline passed while it waited for a preprocessing thread is not decoded at all.
        if (call->deadline && clock::now() >= *call->deadline)
          return call->row_done(i, fail(errc::timeout, "timeout: deadline passed before preprocessing"));
        auto item = preprocess(*call->inst, raw, is_sample);
        if (!item) return call->row_done(i, std::move(item).error());
        submit_row(call, i, std::move(*item));
      });
    }
  }

  static void submit_row(const std::shared_ptr<infer_call>& call, std::size_t i, tensor item) {
    batching::submit_options<shape_bucket> opts;
    opts.bucket = bucket_of(item);
    opts.deadline = call->deadline;
    call->inst->batcher().submit(row_item{std::move(item), call->deadline}, std::move(opts),
                                 [call, i](result<models::named_tensors> r) { call->row_done(i, std::move(r)); });
  }

  // Inputs that name a region get its bytes; outputs that name one get it held until the answer (both
  // front ends' requests pass here).
  result<void> resolve_shared_memory(infer_call& c) const {
    if (!uses_shared_memory(c.req)) return {};
    if (!shm_) return fail(errc::invalid_argument, "the shared memory extension is not enabled in this service");
    JITEMBED_TRY(read_shared_memory_inputs(*shm_, c.req, config_.protocol));
    JITEMBED_ASSIGN_OR_RETURN(c.shm_outputs, hold_shared_memory_outputs(*shm_, c.req.outputs));
    return {};
  }

  // Compressed inputs (net/kserve/compression.hpp) decompressed: at most max_body_bytes each (checked
  // before allocating), then checked against their shape like any input.
  result<void> decompress_inputs(infer_call& c) const {
    for (auto& t : c.req.inputs) {
      const std::string w = "input '" + t.name + "'";
      JITEMBED_ASSIGN_OR_RETURN(const auto raw_size, net::kserve::compressed_tensor(t.parameters, w));
      if (!raw_size) continue;
      const std::size_t es = t.type == net::kserve::datatype::bytes ? 1 : net::kserve::element_size(t.type);
      auto raw = codec::decompress_from_wire(t.data, *raw_size, es, config_.protocol.max_body_bytes);
      if (!raw)
        return fail(raw.code() == errc::limit_exceeded ? errc::limit_exceeded : errc::decode_failed,
                    w + ": compressed data: " + raw.error().message);
      auto buf = std::make_shared<const byte_buffer>(std::move(*raw));
      t.data = bytes_view(buf->data(), buf->size());
      t.storage = std::move(buf);
      net::kserve::clear_compressed(t);
      JITEMBED_TRY(net::kserve::detail::check_tensor_data(t, w));
    }
    return {};
  }

  // The model's input from a row: raw field bytes, or a record's first field of the model's kind (shared
  // with the client's local mode).
  result<tensor> preprocess(const model_instance& inst, std::string_view raw, bool is_sample) const {
    const bytes_view bytes(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
    return models::preprocess_input(inst.model(), bytes, is_sample, config_.decode);
  }

  static std::uint64_t elapsed_ns(clock::time_point start) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count());
  }

  // The deadline passed before every row was done: answer timeout now (rows still running finish later,
  // unanswered).
  void expire(infer_call& c) {
    if (c.answered.load(std::memory_order_acquire)) return;
    finish_error(c, fail(errc::timeout, "timeout: deadline passed after " + std::to_string(elapsed_ns(c.start) / 1000) +
                                            " us while model '" + c.inst->name() + "' ran the request's rows"));
  }

  void finish_error(infer_call& c, const error_info& e) {
    if (c.answered.exchange(true, std::memory_order_acq_rel)) return;
    answer(c, e);
  }

  // Counts and answers `r` (the caller set `answered`).
  void answer(infer_call& c, result<infer_output> r) {
    auto& counters = c.inst->counters();
    (r ? counters.success : counters.failure).fetch_add(1, std::memory_order_relaxed);
    (r ? counters.success_ns : counters.failure_ns).fetch_add(elapsed_ns(c.start), std::memory_order_relaxed);
    if (r) {
      counters.inferences.fetch_add(c.rows.size(), std::memory_order_relaxed);
      counters.last_inference_ms.store(now_ms(), std::memory_order_relaxed);
    }
    auto done = std::move(c.done);
    c.inst->release_rows(c.admitted);  // before answering: the client may send its next request at once
    done(std::move(r));
    registry_.release(*c.inst);
  }

  // All rows are done: build the response (or answer the first error).
  void finish(infer_call& c) {
    if (c.answered.load(std::memory_order_acquire)) return;  // expired: answered timeout already
    if (c.first_error) return finish_error(c, *c.first_error);
    auto encoded = stack_outputs(c);
    if (!encoded) return finish_error(c, encoded.error());
    if (c.answered.exchange(true, std::memory_order_acq_rel)) return;  // expired while stacking: counted there
    if (!c.shm_outputs.empty()) {
      // Nothing is written into shared memory past the deadline: a client reuses the span of a request it gave
      // up on. The answer is claimed above, so the deadline timer cannot answer while the outputs are written.
      if (c.deadline && clock::now() >= *c.deadline)
        return answer(c, fail(errc::timeout,
                              "timeout: deadline passed before the outputs were written into "
                              "shared memory (not written)"));
      encoded = write_shared_memory_outputs(std::move(*encoded), c.shm_outputs);
      if (!encoded) return answer(c, encoded.error());
    }
    answer(c, std::move(encoded));
  }

  // Stacks the rows' outputs into [rows, ...] tensors: the KServe response.
  result<infer_output> stack_outputs(infer_call& c) {
    const auto& m = c.inst->model();
    auto resp = std::make_shared<net::kserve::infer_response>();
    resp->model_name = c.inst->name();
    resp->model_version = c.inst->version();
    resp->id = c.req.id;
    const bool compress = net::kserve::accepts_compression(c.req.parameters);
    const auto metas = m.outputs();
    for (std::size_t k = 0; k < metas.size(); ++k) {
      const auto& meta = metas[k];
      if (!c.req.outputs.empty() &&
          std::none_of(c.req.outputs.begin(), c.req.outputs.end(), [&](const auto& o) { return o.name == meta.name; }))
        continue;
      const tensor* first = find_tensor(c.rows.front(), meta.name);
      if (!first)
        return fail(errc::internal, "model '" + c.inst->name() + "' did not produce output '" + meta.name + "'");
      std::vector<std::int64_t> shape{static_cast<std::int64_t>(c.rows.size())};
      for (auto d : first->shape()) shape.push_back(d);
      byte_buffer bytes(first->nbytes() * c.rows.size());
      for (std::size_t i = 0; i < c.rows.size(); ++i) {
        const tensor* t = find_tensor(c.rows[i], meta.name);
        if (!t || t->dtype() != first->dtype() || !(t->shape() == first->shape()) || !t->is_contiguous())
          return fail(errc::invalid_argument,
                      "output '" + meta.name + "' of row " + std::to_string(i) +
                          " differs in dtype or shape from row 0: rows of one request must share a shape");
        if (t->nbytes()) std::memcpy(bytes.data() + i * first->nbytes(), t->data(), t->nbytes());
      }
      const auto dt = net::kserve::from_dtype(first->dtype());
      const bool to_region = std::any_of(c.req.outputs.begin(), c.req.outputs.end(), [&](const auto& o) {
        return o.name == meta.name && net::kserve::has_shared_memory(o.parameters);
      });
      if (compress && !to_region) {  // the client offered: compressed when that saves the stated fraction
        JITEMBED_ASSIGN_OR_RETURN(
            auto packed, codec::compress_for_wire(bytes_view(bytes.data(), bytes.size()), element_size(first->dtype()),
                                                  config_.compression));
        if (packed) {
          const auto raw_size = bytes.size();
          auto t =
              net::kserve::infer_tensor::owned(meta.name, dt, std::move(shape), std::move(*packed), /*binary=*/true);
          net::kserve::mark_compressed(t, raw_size);
          resp->outputs.push_back(std::move(t));
          continue;
        }
      }
      resp->outputs.push_back(net::kserve::infer_tensor::owned(meta.name, dt, std::move(shape), std::move(bytes),
                                                               net::kserve::wants_binary(c.req, meta.name, dt)));
    }
    return infer_output(std::move(resp));
  }

  model_registry& registry_;
  const server_config& config_;
  const shared_memory_registry* shm_ = nullptr;
  deadline_timer<infer_call> timer_;
  thread_pool pool_;  // last: its threads stop first
};

}  // namespace jitembed::server::detail
