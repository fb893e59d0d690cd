// cuDNN's fused scaled dot-product attention (flash attention: no [S, S] scores in memory; the softmax's
// log-sum-exp saved for backward) through the cuDNN frontend's graph API, bf16/f16, forward and backward, one
// graph per shape built once and cached; and cudnn_attention, the cuda_backend attention engine over it.
#pragma once

#include <cudnn.h>
#include <cudnn_frontend.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/cuda/attention.hpp"
#include "jitembed/parallel/detail/capture.hpp"

namespace jitembed::parallel {

namespace detail {

inline void cudnn_check(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  (void)cudaGetLastError();
  const errc code = s == CUDNN_STATUS_ALLOC_FAILED ? errc::resource_exhausted : errc::internal;
  throw error(code, std::string("cudnn: ") + expr + " failed: " + cudnnGetErrorString(s) + " at " + file + ":" +
                        std::to_string(line));
}

}  // namespace detail

}  // namespace jitembed::parallel

#define JITEMBED_CUDNN_CHECK(expr) ::jitembed::parallel::detail::cudnn_check((expr), #expr, __FILE__, __LINE__)

namespace jitembed::parallel {

// Where the four dims of q, k, v and out lie in memory: [B, S, H, D] (cuda_backend's and nn::'s layout; the
// heads interleaved, row pitch H·D) or [B, H, S, D] (torch's scaled_dot_product_attention). Both contiguous.
enum class sdpa_layout : std::uint8_t { bshd, bhsd };

namespace detail {

namespace fe = ::cudnn_frontend;

// A frontend call's status as a jitembed error: GRAPH_NOT_SUPPORTED (no cuDNN engine for this shape, dtype or
// device) is invalid_argument, the caller can pick another path; the rest are internal.
inline void cudnn_fe_check(fe::error_t e, const std::string& what) {
  if (e.is_good()) return;
  (void)cudaGetLastError();
  const errc code = e.get_code() == fe::error_code_t::GRAPH_NOT_SUPPORTED ? errc::invalid_argument : errc::internal;
  throw error(code, what + ": " + e.get_message());
}

// An RAII cudnnHandle_t on the device current at creation, enqueueing on a stream.
class cudnn_handle {
 public:
  static cudnn_handle create(jitembed::cuda::stream_ref stream) {
    cudnn_handle h;
    JITEMBED_CUDA_CHECK(cudaGetDevice(&h.device_));
    JITEMBED_CUDNN_CHECK(cudnnCreate(&h.h_));
    JITEMBED_CUDNN_CHECK(cudnnSetStream(h.h_, stream.get()));
    return h;
  }
  cudnn_handle() = default;
  cudnn_handle(const cudnn_handle&) = delete;
  cudnn_handle& operator=(const cudnn_handle&) = delete;
  cudnn_handle(cudnn_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)), device_(o.device_) {}
  cudnn_handle& operator=(cudnn_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
      device_ = o.device_;
    }
    return *this;
  }
  ~cudnn_handle() { reset(); }
  cudnnHandle_t get() const noexcept { return h_; }
  int cuda_device() const noexcept { return device_; }

 private:
  void reset() noexcept {
    if (h_ != nullptr) (void)cudnnDestroy(h_);
    h_ = nullptr;
  }
  cudnnHandle_t h_ = nullptr;
  int device_ = 0;
};

// One graph's identity: everything its tensors' dims, strides and the mask depend on.
struct sdpa_key {
  bool backward;
  std::int64_t b, h, sq, sk, d;
  bool causal;
  dtype t;
  sdpa_layout layout;
  auto tie() const { return std::tie(backward, b, h, sq, sk, d, causal, t, layout); }
  bool operator<(const sdpa_key& o) const { return tie() < o.tie(); }
};

struct sdpa_graph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
};

// The uids of the graphs' tensors (variant pack keys).
enum sdpa_uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// Strides of a [B, H, S, D] view of memory in `layout`.
inline std::vector<std::int64_t> sdpa_strides(sdpa_layout l, std::int64_t h, std::int64_t s, std::int64_t d) {
  if (l == sdpa_layout::bshd) return {s * h * d, d, h * d, 1};
  return {h * s * d, s * d, d, 1};
}

}  // namespace detail

// cuDNN's flash attention on one device. out = softmax(q·kᵀ/√D [+ causal mask])·v per batch row and head, as
// nn::attention_forward: causal means key j is visible to query i iff j ≤ i (aligned at the top left, also
// for Sq ≠ Sk). q, out [B, Sq, H, D] and k, v [B, Sk, H, D] (sdpa_layout::bshd; bhsd: [B, H, S, D]), all
// contiguous, one dtype (bf16 or f16), on the handle's device; lse f32 [B, H, Sq]: log Σ_visible
// exp(q·kᵀ/√D) per query row (cuDNN's softmax stats), written by forward, read by backward. The
// arithmetic is f32 inside (scores, softmax, accumulators). Enqueued on the stream given at creation; the
// workspace is device memory allocated per call on that stream (counted by memory_account) and freed
// stream-ordered. One thread at a time (the cudnnHandle_t and the cache are not shared across threads).
// Errors: invalid_argument for bad arguments (specific messages, before anything is enqueued) and for a
// shape cuDNN has no engine for ("cudnn sdpa forward: not supported: ..."), internal for another cuDNN or
// CUDA failure.
class cudnn_sdpa {
 public:
  static result<cudnn_sdpa> create(jitembed::cuda::stream_ref stream) {
    return detail::capture("cudnn_sdpa create", [&]() -> result<cudnn_sdpa> {
      cudnn_sdpa s;
      s.state_ = std::make_shared<state>();
      s.state_->handle = detail::cudnn_handle::create(stream);
      s.state_->stream = stream;
      return s;
    });
  }

  result<void> forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                       const tensor_view& out, const tensor_view& lse, sdpa_layout layout = sdpa_layout::bshd) {
    return detail::capture("cudnn sdpa forward", [&]() -> result<void> {
      const auto dm = check(q, k, v, layout, "cudnn sdpa forward");
      check_like(out, q, "out", "cudnn sdpa forward");
      check_lse(lse, dm, "cudnn sdpa forward");
      if (q.numel() == 0) return {};
      const detail::sdpa_graph& g = graph({false, dm.b, dm.h, dm.sq, dm.sk, dm.d, causal, q.dtype(), layout});
      std::unordered_map<std::int64_t, void*> pack{{detail::kQ, q.data()},   {detail::kK, k.data()},
                                                   {detail::kV, v.data()},   {detail::kO, out.data()},
                                                   {detail::kStats, lse.data()}};
      execute(g, pack, "cudnn sdpa forward");
      return {};
    });
  }

  // dq, dk, dv (overwritten) from forward's out and lse, and dout (out's shape); same mask as forward.
  result<void> backward(const tensor_view& q, const tensor_view& k, const tensor_view& v, const tensor_view& out,
                        const tensor_view& dout, const tensor_view& lse, bool causal, const tensor_view& dq,
                        const tensor_view& dk, const tensor_view& dv, sdpa_layout layout = sdpa_layout::bshd) {
    return detail::capture("cudnn sdpa backward", [&]() -> result<void> {
      constexpr const char* fn = "cudnn sdpa backward";
      const auto dm = check(q, k, v, layout, fn);
      check_like(out, q, "out", fn);
      check_like(dout, q, "dout", fn);
      check_like(dq, q, "dq", fn);
      check_like(dk, k, "dk", fn);
      check_like(dv, k, "dv", fn);
      check_lse(lse, dm, fn);
      if (q.numel() == 0) return {};
      const detail::sdpa_graph& g = graph({true, dm.b, dm.h, dm.sq, dm.sk, dm.d, causal, q.dtype(), layout});
      std::unordered_map<std::int64_t, void*> pack{
          {detail::kQ, q.data()},     {detail::kK, k.data()},   {detail::kV, v.data()},   {detail::kO, out.data()},
          {detail::kDO, dout.data()}, {detail::kStats, lse.data()}, {detail::kDQ, dq.data()}, {detail::kDK, dk.data()},
          {detail::kDV, dv.data()}};
      execute(g, pack, fn);
      return {};
    });
  }

  // Graphs built so far (one per direction and shape).
  std::size_t cached_graphs() const noexcept { return state_ ? state_->graphs.size() : 0; }
  // The largest workspace a call has used, in bytes.
  std::int64_t max_workspace_bytes() const noexcept { return state_ ? state_->max_workspace : 0; }
  jitembed::cuda::stream_ref stream() const noexcept { return state_->stream; }
  int cuda_device() const noexcept { return state_->handle.cuda_device(); }

 private:
  struct state {
    detail::cudnn_handle handle;
    jitembed::cuda::stream_ref stream;
    std::map<detail::sdpa_key, detail::sdpa_graph> graphs;
    std::int64_t max_workspace = 0;
  };
  struct dims {
    std::int64_t b, sq, sk, h, d;
  };

  static std::string shape_str(const tensor_view& x) { return x.shape().to_string(); }

  dims check(const tensor_view& q, const tensor_view& k, const tensor_view& v, sdpa_layout layout, const char* fn) const {
    const auto arg = [&](const std::string& m) { return error(errc::invalid_argument, std::string(fn) + ": " + m); };
    if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
      throw arg("q, k, v must be 4-d, got q " + shape_str(q) + " k " + shape_str(k) + " v " + shape_str(v));
    }
    if (q.dtype() != dtype::bf16 && q.dtype() != dtype::f16) {
      throw error(errc::dtype_mismatch, std::string(fn) + ": dtype " + std::string(to_string(q.dtype())) +
                                            " (bf16 or f16 only: cuDNN's fused attention)");
    }
    if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
      throw error(errc::dtype_mismatch, std::string(fn) + ": q, k, v must have one dtype, got " +
                                            std::string(to_string(q.dtype())) + ", " + std::string(to_string(k.dtype())) +
                                            ", " + std::string(to_string(v.dtype())));
    }
    if (!(v.shape() == k.shape())) throw arg("v " + shape_str(v) + " must have k's shape " + shape_str(k));
    const bool bshd = layout == sdpa_layout::bshd;
    const dims dm{q.size(0), q.size(bshd ? 1 : 2), k.size(bshd ? 1 : 2), q.size(bshd ? 2 : 1), q.size(3)};
    const std::int64_t kh = k.size(bshd ? 2 : 1);
    if (k.size(0) != dm.b || kh != dm.h || k.size(3) != dm.d) {
      throw arg("k must match q in B, H and D, got q " + shape_str(q) + " k " + shape_str(k));
    }
    if (dm.d % 8 != 0 || dm.d > 256 || dm.d == 0) {
      throw arg("head dim " + std::to_string(dm.d) + " (a multiple of 8, at most 256)");
    }
    if (dm.sq > 0 && dm.sk == 0) throw arg("no keys to attend to, got k " + shape_str(k));
    check_device(q, "q", fn);
    check_device(k, "k", fn);
    check_device(v, "v", fn);
    return dm;
  }

  void check_device(const tensor_view& x, const char* name, const char* fn) const {
    if (x.device() != jitembed::device::cuda(state_->handle.cuda_device()) || (x.numel() > 0 && !x.is_contiguous())) {
      throw error(errc::invalid_argument, std::string(fn) + ": " + name + " must be a contiguous tensor on cuda:" +
                                              std::to_string(state_->handle.cuda_device()));
    }
  }

  void check_like(const tensor_view& x, const tensor_view& ref, const char* name, const char* fn) const {
    if (!(x.shape() == ref.shape())) {
      throw error(errc::invalid_argument,
                  std::string(fn) + ": " + name + " " + shape_str(x) + " must have the shape " + shape_str(ref));
    }
    if (x.dtype() != ref.dtype()) {
      throw error(errc::dtype_mismatch, std::string(fn) + ": " + name + " is " + std::string(to_string(x.dtype())) +
                                            ", q is " + std::string(to_string(ref.dtype())));
    }
    check_device(x, name, fn);
  }

  void check_lse(const tensor_view& lse, const dims& dm, const char* fn) const {
    if (lse.dtype() != dtype::f32 || !(lse.shape() == shape{dm.b, dm.h, dm.sq})) {
      throw error(errc::invalid_argument, std::string(fn) + ": lse must be f32 " + shape{dm.b, dm.h, dm.sq}.to_string() +
                                              ", got " + std::string(to_string(lse.dtype())) + " " + shape_str(lse));
    }
    check_device(lse, "lse", fn);
  }

  // The cached graph of `key`, built (validated, lowered, planned with heuristics mode A then the fallback
  // list, checked for support) on first use.
  const detail::sdpa_graph& graph(const detail::sdpa_key& key) {
    namespace fe = ::cudnn_frontend;
    auto it = state_->graphs.find(key);
    if (it != state_->graphs.end()) return it->second;
    const std::string what = std::string(key.backward ? "cudnn sdpa backward" : "cudnn sdpa forward");
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(key.t == dtype::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const auto qs = detail::sdpa_strides(key.layout, key.h, key.sq, key.d);
    const auto ks = detail::sdpa_strides(key.layout, key.h, key.sk, key.d);
    const std::vector<std::int64_t> qdim{key.b, key.h, key.sq, key.d}, kdim{key.b, key.h, key.sk, key.d};
    const std::vector<std::int64_t> sdim{key.b, key.h, key.sq, 1}, sstride{key.h * key.sq, key.sq, 1, 1};
    const auto tensor_of = [&](const char* name, std::int64_t uid, const std::vector<std::int64_t>& dim,
                               const std::vector<std::int64_t>& stride) {
      return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
    };
    auto q = tensor_of("Q", detail::kQ, qdim, qs);
    auto k = tensor_of("K", detail::kK, kdim, ks);
    auto v = tensor_of("V", detail::kV, kdim, ks);
    const float scale = 1.0f / std::sqrt(static_cast<float>(key.d));
    if (!key.backward) {
      auto opt = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
      if (key.causal) opt.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
      auto [o, stats] = g->sdpa(q, k, v, opt);
      o->set_output(true).set_dim(qdim).set_stride(qs).set_uid(detail::kO);
      stats->set_output(true).set_data_type(fe::DataType_t::FLOAT).set_dim(sdim).set_stride(sstride).set_uid(detail::kStats);
    } else {
      auto o = tensor_of("O", detail::kO, qdim, qs);
      auto dout = tensor_of("dO", detail::kDO, qdim, qs);
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("Stats")
                                 .set_uid(detail::kStats)
                                 .set_dim(sdim)
                                 .set_stride(sstride)
                                 .set_data_type(fe::DataType_t::FLOAT));
      auto opt = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale);
      if (key.causal) opt.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
      dq->set_output(true).set_dim(qdim).set_stride(qs).set_uid(detail::kDQ);
      dk->set_output(true).set_dim(kdim).set_stride(ks).set_uid(detail::kDK);
      dv->set_output(true).set_dim(kdim).set_stride(ks).set_uid(detail::kDV);
    }
    const std::string shape_note = " (B " + std::to_string(key.b) + ", H " + std::to_string(key.h) + ", Sq " +
                                   std::to_string(key.sq) + ", Sk " + std::to_string(key.sk) + ", D " +
                                   std::to_string(key.d) + (key.causal ? ", causal" : "") + ")";
    cudnnHandle_t h = state_->handle.get();
    detail::cudnn_fe_check(g->validate(), what + ": validate" + shape_note);
    detail::cudnn_fe_check(g->build_operation_graph(h), what + ": build_operation_graph" + shape_note);
    detail::cudnn_fe_check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                           what + ": create_execution_plans" + shape_note);
    detail::cudnn_fe_check(g->check_support(h), what + ": not supported" + shape_note);
    detail::cudnn_fe_check(g->build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), what + ": build_plans" + shape_note);
    detail::sdpa_graph built{std::move(g), 0};
    detail::cudnn_fe_check(built.graph->get_workspace_size(built.workspace), what + ": get_workspace_size");
    return state_->graphs.emplace(key, std::move(built)).first->second;
  }

  void execute(const detail::sdpa_graph& g, std::unordered_map<std::int64_t, void*>& pack, const char* fn) {
    tensor ws;
    if (g.workspace > 0) {
      ws = jitembed::cuda::empty_device(shape{g.workspace}, dtype::u8, state_->stream, state_->handle.cuda_device());
      if (g.workspace > state_->max_workspace) state_->max_workspace = g.workspace;
    }
    detail::cudnn_fe_check(g.graph->execute(state_->handle.get(), pack, ws.defined() ? ws.data() : nullptr),
                           std::string(fn) + ": execute");
    // ws is freed on the stream after the kernels that use it (stream-ordered cudaFreeAsync).
  }

  std::shared_ptr<state> state_;
};

// cuda_backend's attention through cudnn_sdpa (cuda_backend::create(stream, dtype::bf16,
// make_cudnn_attention(stream).value())): forward saves the log-sum-exp and shares the caller's out (O(S) per
// head, never the probabilities; nothing copied); backward recomputes the scores blockwise inside cuDNN's kernel.
class cudnn_attention final : public cuda_attention_engine {
 public:
  explicit cudnn_attention(cudnn_sdpa sdpa) : sdpa_(std::move(sdpa)) {}

  std::string_view name() const noexcept override { return "cudnn"; }
  bool supports(dtype t) const noexcept override { return t == dtype::bf16 || t == dtype::f16; }

  cuda_attention_saved forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                               const tensor& out) override {
    const auto s = sdpa_.stream();
    const int dev = sdpa_.cuda_device();
    cuda_attention_saved saved;
    saved.causal = causal;
    if (q.rank() == 4) {
      saved.lse = jitembed::cuda::empty_device(shape{q.size(0), q.size(2), q.size(1)}, dtype::f32, s, dev);
    }
    sdpa_.forward(q, k, v, causal, out.view(), saved.lse.view()).value();
    saved.out = out;
    return saved;
  }

  void backward(const tensor_view& q, const tensor_view& k, const tensor_view& v, const cuda_attention_saved& saved,
                const tensor_view& dout, const tensor_view& dq, const tensor_view& dk, const tensor_view& dv) override {
    sdpa_.backward(q, k, v, saved.out.view(), dout, saved.lse.view(), saved.causal, dq, dk, dv).value();
  }

  cudnn_sdpa& sdpa() noexcept { return sdpa_; }

 private:
  cudnn_sdpa sdpa_;
};

// A cudnn_attention on the current device, enqueueing on `stream` (the cuda_backend's).
inline result<cuda_attention> make_cudnn_attention(jitembed::cuda::stream_ref stream) {
  JITEMBED_ASSIGN_OR_RETURN(auto sdpa, cudnn_sdpa::create(stream));
  return cuda_attention::of(cudnn_attention(std::move(sdpa)));
}

}  // namespace jitembed::parallel
