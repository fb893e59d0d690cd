// The service's inference pipeline: admission, KServe request decoding, preprocessing on the pool, the
// model's dynamic batcher, response encoding. It knows no HTTP: a front end (the HTTP routes of
// server/detail/service_core.hpp, a gRPC service) hands it the request bytes and gets the encoded KServe
// response (net::kserve::infer_response, which the front end encodes) or an error_info whose errc decides
// the status. Inputs and outputs that name a shared-memory region (Triton's system and CUDA shared-memory
// extensions, detail/shared_memory.hpp) are read from and written to it here, for every front end.
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
#include <span>
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
#include "jitembed/server/detail/render.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/shm/detail/transfer.hpp"

namespace jitembed::server::detail {

inline std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// One inference request as a front end received it.
struct infer_input {
  std::string name;           // the model
  std::string version;        // empty: the highest loaded version
  std::string body;           // KServe JSON header + binary tensors; the decoded tensors view into it
  std::string header_length;  // Inference-Header-Content-Length as received (empty: the body is all JSON)
};

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

  // Runs one request from its bytes (KServe JSON + Triton's binary extension, as the HTTP routes get it).
  // Errors: unavailable (draining, admission bound reached), not_found (model or version), the decoder's
  // and the model's errors, timeout (the request's KServe "timeout" passed). Never blocks on model work.
  void infer(infer_input in, infer_completion done) {
    auto call = admit(in.name, in.version, done);
    if (!call) return;
    call->input = std::move(in);  // the body lives in the call: decoded tensors view into it
    auto decoded = decode(*call);
    if (!decoded) return finish_error(*call, decoded.error());
    dispatch(std::move(call));
  }

  // Runs one request a front end decoded itself (a gRPC front end from its protobuf): `req`'s tensors view
  // into bytes that `storage` keeps valid until `done` is called. Errors: as above.
  void infer(std::string name, std::string version, net::kserve::infer_request req, jitembed::keep_alive storage,
             infer_completion done) {
    auto call = admit(name, version, done);
    if (!call) return;
    call->req = std::move(req);
    call->storage = std::move(storage);
    dispatch(std::move(call));
  }

  // What a request gets while the service drains.
  static error_info not_ready() {
    return as_error(net::kserve::unavailable(net::kserve::unavailable_reason::not_ready, "shutting down"));
  }

 private:
  static error_info as_error(const net::kserve::protocol_error& e) { return fail(e.code, e.message); }

  // State shared by the rows of one inference request.
  struct infer_call {
    std::shared_ptr<model_instance> inst;
    inference_pipeline* owner = nullptr;
    infer_input input;               // the bytes of a request decoded here
    jitembed::keep_alive storage;    // the bytes of a request decoded by the front end
    net::kserve::infer_request req;  // views into `input.body` or `storage` (or copies from shared memory)
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

  static result<std::optional<std::size_t>> parse_header_length(std::string_view h) {
    if (h.empty()) return std::optional<std::size_t>{};
    std::size_t v = 0;
    for (char ch : h) {
      if (ch < '0' || ch > '9' || v > (std::size_t{1} << 40))
        return fail(errc::invalid_argument,
                    "Inference-Header-Content-Length '" + std::string(h) + "' is not a valid length");
      v = v * 10 + static_cast<std::size_t>(ch - '0');
    }
    return std::optional<std::size_t>{v};
  }

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
  void dispatch(std::shared_ptr<infer_call> call) {
    if (auto shm = resolve_shared_memory(*call); !shm) return finish_error(*call, shm.error());
    if (auto raw = decompress_inputs(*call); !raw) return finish_error(*call, raw.error());
    auto rows = check_rows(*call);
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

  // The request's bytes into c.req.
  result<void> decode(infer_call& c) const {
    JITEMBED_ASSIGN_OR_RETURN(const auto header_length, parse_header_length(c.input.header_length));
    JITEMBED_ASSIGN_OR_RETURN(c.req, net::kserve::decode_request(c.input.body, header_length, config_.protocol));
    return {};
  }

  // A request's rows: raw fields to preprocess, or the model's input items as they came.
  struct request_rows {
    std::vector<std::string_view> raw;
    std::vector<tensor> items;
    std::size_t count() const noexcept { return items.empty() ? raw.size() : items.size(); }
  };

  // The rows of the request, by the input it sends (model_metadata() in render.hpp publishes the same):
  // - one BYTES input named as the model's modality ("image" | "video" | "text") or "sample": raw fields the
  //   model preprocesses (models with preprocessing only);
  // - the model's declared input (its name, dtype and [batch, dims...]): items as they are, as Triton takes
  //   them;
  // - token ids for a text model whose input is ids (i64 [2, L]: ids and attention mask, or [L]): "input_ids"
  //   INT64 or INT32 [batch, L], with "attention_mask" of the same shape when the model takes a mask (all ones
  //   when absent, as transformers does).
  result<request_rows> check_rows(infer_call& c) {
    const auto& m = c.inst->model();
    for (const auto& o : c.req.outputs) {
      const auto outs = m.outputs();
      if (std::none_of(outs.begin(), outs.end(), [&](const models::tensor_meta& t) { return t.name == o.name; }))
        return fail(errc::invalid_argument,
                    "unknown output '" + o.name + "' requested from model '" + c.inst->name() + "'");
    }
    if (c.req.inputs.empty())
      return fail(errc::invalid_argument, "model '" + c.inst->name() + "': the request has no inputs");
    const auto& in = c.req.inputs.front();
    const std::string_view modality_name = input_name(m.input_modality());
    const models::tensor_meta& declared = m.inputs().front();
    if (c.req.inputs.size() == 1 && in.type == net::kserve::datatype::bytes &&
        (in.name == modality_name || in.name == "sample")) {
      if (!m.has_preprocess())
        return fail(errc::invalid_argument, "model '" + c.inst->name() + "' has no preprocessing of raw " +
                                                std::string(modality_name) +
                                                " (its config sets no 'modality'): " + expected_inputs(m));
      JITEMBED_TRY(check_batch(in));
      request_rows rows;
      JITEMBED_ASSIGN_OR_RETURN(rows.raw, in.strings());
      return rows;
    }
    if (c.req.inputs.size() == 1 && in.name == declared.name)
      return tensor_rows(in, declared, m.has_preprocess() && in.name == modality_name);
    if (const auto ids = token_id_layout(m); ids && std::any_of(c.req.inputs.begin(), c.req.inputs.end(),
                                                                [](const auto& t) { return t.name == "input_ids"; }))
      return token_id_rows(c.req, *ids, m);
    if (c.req.inputs.size() != 1)
      return fail(errc::invalid_argument, "model '" + c.inst->name() + "' expects 1 input, got " +
                                              std::to_string(c.req.inputs.size()) + ": " + expected_inputs(m));
    if (in.name == modality_name || in.name == "sample")
      return fail(errc::dtype_mismatch, "input '" + in.name + "' has datatype " +
                                            std::string(net::kserve::to_string(in.type)) + ", expected BYTES");
    return fail(errc::invalid_argument,
                "unexpected input '" + in.name + "' for model '" + c.inst->name() + "': " + expected_inputs(m));
  }

  // What a model takes, for messages: "expects 'image' or 'sample' (BYTES), or 'INPUT__0' FP32 [3, 16, 16]".
  static std::string expected_inputs(const models::any_model& m) {
    const auto& d = m.inputs().front();
    std::string s = "expects ";
    if (m.has_preprocess()) s += "'" + std::string(input_name(m.input_modality())) + "' or 'sample' (BYTES), or ";
    s += "'" + d.name + "' " + std::string(net::kserve::to_string(net::kserve::from_dtype(d.type))) + " " +
         net::kserve::detail::shape_string(d.shape);
    if (token_id_layout(m)) s += ", or 'input_ids' (INT64 or INT32)";
    return s;
  }

  // At most max_rows_per_request rows.
  result<void> check_rows_count(const net::kserve::infer_tensor& in, std::int64_t rows) const {
    if (static_cast<std::uint64_t>(rows) > config_.max_rows_per_request)
      return fail(errc::limit_exceeded, "input '" + in.name + "': " + std::to_string(rows) +
                                            " rows > max_rows_per_request " +
                                            std::to_string(config_.max_rows_per_request));
    return {};
  }

  // A BYTES input of raw fields: [batch] or [batch, 1].
  result<void> check_batch(const net::kserve::infer_tensor& in) const {
    const bool shape_ok =
        (in.shape.size() == 1 && in.shape[0] >= 1) || (in.shape.size() == 2 && in.shape[0] >= 1 && in.shape[1] == 1);
    if (!shape_ok)
      return fail(errc::invalid_argument, "input '" + in.name + "' has shape " +
                                              net::kserve::detail::shape_string(in.shape) +
                                              ", expected [batch] or [batch,1]");
    return check_rows_count(in, in.shape[0]);
  }

  // The declared input's rows, each copied into its own aligned item tensor. `or_bytes`: the declared input
  // has the name raw fields come under (a reference model's "image"), so BYTES is the other way in.
  result<request_rows> tensor_rows(const net::kserve::infer_tensor& in, const models::tensor_meta& declared,
                                   bool or_bytes) const {
    const auto want = net::kserve::from_dtype(declared.type);
    if (in.type != want)
      return fail(errc::dtype_mismatch, "input '" + in.name + "' has datatype " +
                                            std::string(net::kserve::to_string(in.type)) + ", expected " +
                                            std::string(or_bytes ? "BYTES or " : "") +
                                            std::string(net::kserve::to_string(want)));
    bool fits = in.shape.size() == declared.shape.size() + 1 && in.shape[0] >= 1;
    for (std::size_t d = 0; fits && d < declared.shape.size(); ++d)
      fits = declared.shape[d] < 0 || in.shape[d + 1] == declared.shape[d];
    if (!fits)
      return fail(errc::invalid_argument, "input '" + in.name + "' has shape " +
                                              net::kserve::detail::shape_string(in.shape) + ", expected [batch] + " +
                                              net::kserve::detail::shape_string(declared.shape));
    JITEMBED_TRY(check_rows_count(in, in.shape[0]));
    return split_rows(in, declared.type, std::span<const std::int64_t>(in.shape).subspan(1));
  }

  // [batch, item...] bytes -> one item tensor per row (the request's bytes may be unaligned for the dtype).
  static result<request_rows> split_rows(const net::kserve::infer_tensor& in, dtype type,
                                         std::span<const std::int64_t> dims) {
    const auto n = static_cast<std::size_t>(in.shape[0]);
    JITEMBED_ASSIGN_OR_RETURN(const auto numel, checked_numel(dims));
    const shape item(dims);
    const std::size_t row_bytes = static_cast<std::size_t>(numel) * element_size(type);
    if (in.data.size() != n * row_bytes)
      return fail(errc::invalid_argument, "input '" + in.name + "' has " + std::to_string(in.data.size()) +
                                              " bytes, its shape needs " + std::to_string(n * row_bytes));
    request_rows rows;
    rows.items.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      tensor t = tensor::empty(item, type);
      if (row_bytes) std::memcpy(t.data(), in.data.data() + i * row_bytes, row_bytes);
      rows.items.push_back(std::move(t));
    }
    return rows;
  }

  // A text model's token-id input: i64 [2, L] (ids and mask) or i64 [L] (ids); nullopt for other models.
  struct token_ids {
    std::int64_t length;
    bool with_mask;
  };
  static std::optional<token_ids> token_id_layout(const models::any_model& m) {
    if (m.input_modality() != models::modality::text) return std::nullopt;
    const auto& d = m.inputs().front();
    if (d.type != dtype::i64) return std::nullopt;
    if (d.shape.size() == 2 && d.shape[0] == 2 && d.shape[1] >= 1) return token_ids{d.shape[1], true};
    if (d.shape.size() == 1 && d.shape[0] >= 1) return token_ids{d.shape[0], false};
    return std::nullopt;
  }

  // "input_ids" [batch, L] (+ "attention_mask") -> the model's id items.
  result<request_rows> token_id_rows(const net::kserve::infer_request& req, token_ids layout,
                                     const models::any_model& m) const {
    const net::kserve::infer_tensor* ids = nullptr;
    const net::kserve::infer_tensor* mask = nullptr;
    for (const auto& t : req.inputs) {
      if (t.name == "input_ids")
        ids = &t;
      else if (t.name == "attention_mask" && layout.with_mask)
        mask = &t;
      else
        return fail(errc::invalid_argument,
                    "unexpected input '" + t.name + "' beside 'input_ids' for model '" + std::string(m.name()) + "' (" +
                        (layout.with_mask ? "it takes 'attention_mask'" : "it takes no mask") + ")");
    }
    for (const auto* t : {ids, mask}) {
      if (!t) continue;
      if (t->type != net::kserve::datatype::int64 && t->type != net::kserve::datatype::int32)
        return fail(errc::dtype_mismatch, "input '" + t->name + "' has datatype " +
                                              std::string(net::kserve::to_string(t->type)) +
                                              ", expected INT64 or INT32");
      if (t->shape.size() != 2 || t->shape[0] < 1 || t->shape[1] != layout.length ||
          (mask && mask->shape != ids->shape))
        return fail(errc::invalid_argument, "input '" + t->name + "' has shape " +
                                                net::kserve::detail::shape_string(t->shape) + ", expected [batch, " +
                                                std::to_string(layout.length) + "]" +
                                                (mask ? " (input_ids and attention_mask alike)" : ""));
      const std::size_t es = t->type == net::kserve::datatype::int64 ? 8 : 4;
      if (t->data.size() != static_cast<std::size_t>(t->shape[0] * t->shape[1]) * es)
        return fail(errc::invalid_argument,
                    "input '" + t->name + "' has " + std::to_string(t->data.size()) + " bytes for its shape");
    }
    JITEMBED_TRY(check_rows_count(*ids, ids->shape[0]));
    const auto element = [](const net::kserve::infer_tensor& t, std::size_t k) -> std::int64_t {
      if (t.type == net::kserve::datatype::int64) {
        std::int64_t v;
        std::memcpy(&v, t.data.data() + k * 8, 8);
        return v;
      }
      std::int32_t v;
      std::memcpy(&v, t.data.data() + k * 4, 4);
      return v;
    };
    const auto n = static_cast<std::size_t>(ids->shape[0]);
    const auto L = static_cast<std::size_t>(layout.length);
    request_rows rows;
    rows.items.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      tensor t = tensor::empty(layout.with_mask ? shape{2, layout.length} : shape{layout.length}, dtype::i64);
      auto* out = t.data<std::int64_t>();
      for (std::size_t k = 0; k < L; ++k) out[k] = element(*ids, i * L + k);
      if (layout.with_mask)
        for (std::size_t k = 0; k < L; ++k) out[L + k] = mask ? element(*mask, i * L + k) : 1;
      rows.items.push_back(std::move(t));
    }
    return rows;
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
    answer_error(c, e);
  }

  // Answers `e` (the caller set `answered`).
  void answer_error(infer_call& c, const error_info& e) {
    auto& inst = *c.inst;
    inst.counters().failure.fetch_add(1, std::memory_order_relaxed);
    inst.counters().failure_ns.fetch_add(elapsed_ns(c.start), std::memory_order_relaxed);
    auto done = std::move(c.done);
    inst.release_rows(c.admitted);  // before answering: the client may send its next request at once
    done(e);
    registry_.release(inst);
  }

  // All rows are done: build the response (or answer the first error).
  void finish(infer_call& c) {
    if (c.answered.load(std::memory_order_acquire)) return;  // expired: answered timeout already
    if (c.first_error) return finish_error(c, *c.first_error);
    auto encoded = stack_outputs(c);
    if (!encoded) return finish_error(c, encoded.error());
    if (c.answered.exchange(true, std::memory_order_acq_rel)) return;  // expired while stacking: counted there
    if (!c.shm_outputs.empty()) {
      // Nothing is written into shared memory once the request's deadline passed (the answer is then timeout):
      // a client reuses the span of a request it gave up on after that deadline (jit_client's shared memory).
      // The answer was claimed above, so the deadline timer cannot answer while the outputs are written.
      if (c.deadline && clock::now() >= *c.deadline)
        return answer_error(c, fail(errc::timeout,
                                    "timeout: deadline passed before the outputs were written into "
                                    "shared memory (not written)"));
      encoded = write_shared_memory_outputs(std::move(*encoded), c.shm_outputs);
      if (!encoded) return answer_error(c, encoded.error());
    }
    auto& inst = *c.inst;
    inst.counters().success.fetch_add(1, std::memory_order_relaxed);
    inst.counters().inferences.fetch_add(c.rows.size(), std::memory_order_relaxed);
    inst.counters().success_ns.fetch_add(elapsed_ns(c.start), std::memory_order_relaxed);
    inst.counters().last_inference_ms.store(now_ms(), std::memory_order_relaxed);
    auto done = std::move(c.done);
    inst.release_rows(c.admitted);  // before answering: the client may send its next request at once
    done(std::move(*encoded));
    registry_.release(inst);
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
