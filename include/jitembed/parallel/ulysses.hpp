// DeepSpeed-Ulysses sequence parallelism for attention: all-to-all from sequence-sharded to head-sharded
// layout, local attention over the whole sequence for H/n heads, and all-to-all back; backward reversed.
//
// Layout: q, k, v, out are [B, S, H, D] (nn::attention_forward). Sequence-sharded tensors hold rank r's
// chunk of S in torch.chunk layout ([B, S_r, H, D], all heads); head-sharded tensors hold the whole sequence
// and heads [r·H/n, (r+1)·H/n) ([B, S, H/n, D]). H must be divisible by the degree; S need not be, but then
// the global sequence length must be passed (every rank cannot infer it from its own chunk). Tensors on the
// CPU, or on the communicator's device (copy2d.hpp) with a device backend (backend.hpp) for the attention.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "jitembed/nn/attention.hpp"
#include "jitembed/parallel/backend.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/detail/capture.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/mappings.hpp"

namespace jitembed::parallel {

namespace detail {

// On `dev` (the CPU, or the device of the communicator / backend), contiguous, [B, S, H, D].
inline result<void> check_bshd(const tensor_view& x, const char* what, const char* name, jitembed::device dev = {}) {
  if (x.device() != dev) {
    return fail(errc::invalid_argument, std::string(what) + ": " + name +
                                            (dev.is_cpu() ? std::string(" must be a CPU tensor")
                                                          : " must be on CUDA device " + std::to_string(dev.ordinal)));
  }
  if (!x.is_contiguous()) return fail(errc::invalid_argument, std::string(what) + ": " + name + " must be contiguous");
  if (x.rank() != 4) {
    return fail(errc::invalid_argument,
                std::string(what) + ": " + name + " must be [B, S, H, D], got " + x.shape().to_string());
  }
  return {};
}

inline result<void> check_heads_divisible(std::int64_t heads, int degree, const char* what) {
  if (heads <= 0 || heads % degree != 0) {
    return fail(errc::invalid_argument, std::string(what) + ": " + std::to_string(heads) +
                                            " heads not divisible by sequence-parallel degree " +
                                            std::to_string(degree));
  }
  return {};
}

template <class B>
concept attention_can_drop_output = requires(const B& b, typename B::attention_saved& s) {
  b.attention_drop_output(s);
};
template <class B>
concept attention_takes_delta = attention_can_drop_output<B> &&
    requires(const B& b, typename B::attention_saved& s, const tensor_view& v, tensor t) {
  { b.attention_delta(v, v) } -> std::same_as<tensor>;
  b.attention_use_delta(s, std::move(t));
};

}  // namespace detail

// [B, S_r, H, D] (rank r's sequence chunk, all heads) → [B, S, H/n, D] (whole sequence, rank r's heads).
// seq_len is the global S; -1 means S_r × n (evenly sharded). One all_to_all (all_to_all_v if uneven).
// try_seq_to_head returns the error (invalid_argument, the collective's); seq_to_head throws it.
template <communicator C>
result<tensor> try_seq_to_head(C& comm, const tensor_view& x, std::int64_t seq_len = -1) {
  constexpr const char* what = "seq_to_head";
  JITEMBED_TRY(detail::check_bshd(x, what, "x", x.device().is_cpu() ? jitembed::device::cpu() : comm.device()));
  JITEMBED_TRY(detail::check_heads_divisible(x.size(2), comm.size(), what));
  if (seq_len < 0) seq_len = x.size(1) * comm.size();
  if (comm.size() == 1) {
    if (seq_len != x.size(1)) {
      return fail(errc::invalid_argument, std::string(what) + ": sequence length " + std::to_string(seq_len) +
                                              " on one rank holding " + std::to_string(x.size(1)));
    }
    return detail::copy_on(comm, x);
  }
  return all_to_all_dim(comm, x, 2, 1, seq_len);
}

template <communicator C>
tensor seq_to_head(C& comm, const tensor_view& x, std::int64_t seq_len = -1) {
  return try_seq_to_head(comm, x, seq_len).value();
}

// [B, S, H/n, D] (whole sequence, rank r's heads) → [B, S_r, H, D] (rank r's torch.chunk of S, all heads).
// One all_to_all (all_to_all_v if S is not divisible by n). try_head_to_seq returns the error, head_to_seq
// throws it.
template <communicator C>
result<tensor> try_head_to_seq(C& comm, const tensor_view& x) {
  constexpr const char* what = "head_to_seq";
  JITEMBED_TRY(detail::check_bshd(x, what, "x", x.device().is_cpu() ? jitembed::device::cpu() : comm.device()));
  if (comm.size() == 1) return detail::copy_on(comm, x);
  return all_to_all_dim(comm, x, 1, 2, x.size(2) * comm.size());
}

template <communicator C>
tensor head_to_seq(C& comm, const tensor_view& x) {
  return try_head_to_seq(comm, x).value();
}

// Self- or cross-attention over a sequence-sharded batch: forward does 4 all_to_alls (q, k, v to head-sharded,
// the output back), backward 4 (dout to head-sharded, dq, dk, dv back). Each all_to_all moves the local
// tensor's bytes (nccl-tests size: the send buffer). Saves the head-sharded q, k, v and the local attention's
// O(S) state (blockwise: lse and, per saved_output, the output), released as soon as backward has used them.
// The local attention runs on B (backend.hpp): q, k, v on B's device in B's dtype.
//
// What the layer keeps for backward's δ = rowsum(dO ⊙ O). The head-sharded output [B, S, H/n, D] is the
// largest thing a rank keeps beyond what the replicated layout keeps (its twin in the sequence layout is the
// output the caller holds); the other two keep none, gradients bitwise the same:
enum class ulysses_saved_output {
  head_sharded,    // keep it (every backend; the default)
  exchange_delta,  // keep a handle to the sequence-sharded output forward returned (shared, not copied: a
                   // caller that keeps it for the next layer's backward pays nothing; it must not overwrite it
                   // before backward); backward computes δ there and exchanges it: one more all_to_all of
                   // 1/D of dout's bytes. Backends with attention_delta (cpu_backend)
  recompute,       // nothing: backward recomputes the local output (one more local attention forward: ~1.3x the
                   // step on CPU). Backends with attention_drop_output (cpu_backend)
};                 // the cuDNN engine's backward reads O itself: it keeps head_sharded whatever is asked

struct ulysses_attention_options {
  bool causal = false;  // query i attends to keys 0..i (global positions)
  ulysses_saved_output saved_output = ulysses_saved_output::head_sharded;
};

template <keepable_communicator C, math_backend B = cpu_backend>
class ulysses_attention {
 public:
  struct grads {
    tensor dq, dk, dv;  // sequence-sharded like q, k, v
  };

  // invalid_argument: this rank outside comm's group, heads not a positive multiple of the group size.
  // The layer keeps a copy of comm (keep_communicator): moving comm afterwards leaves the layer valid.
  static result<ulysses_attention> create(const C& comm, int heads, ulysses_attention_options opt = {},
                                          B backend = B()) {
    if (!comm.valid()) {
      return fail(errc::invalid_argument, "ulysses_attention: this rank is not in the communicator's group");
    }
    JITEMBED_TRY(detail::check_heads_divisible(heads, comm.size(), "ulysses_attention"));
    return detail::capture("ulysses_attention",
                           [&] { return ulysses_attention(comm, heads, opt, std::move(backend)); });
  }

  // q [B, Sq_r, H, D], k and v [B, Sk_r, H, D]: this rank's sequence chunks (torch.chunk layout). seq_len and
  // kv_seq_len are the global lengths (-1: local × n, evenly sharded; kv_seq_len -1 with k shaped like q
  // means seq_len). Returns out [B, Sq_r, H, D].
  result<tensor> forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, std::int64_t seq_len = -1,
                         std::int64_t kv_seq_len = -1) {
    return forward_impl(q, k, v, seq_len, kv_seq_len, {});
  }
  // The same, taking the caller's q, k and v: each is released as soon as its head-sharded copy exists, so
  // the two layouts of all three are never alive at once (the peak of the forward drops by up to two
  // chunks; the layer keeps only the head-sharded copies, as it does either way).
  result<tensor> forward(tensor&& q, tensor&& k, tensor&& v, std::int64_t seq_len = -1, std::int64_t kv_seq_len = -1) {
    // one object given twice (forward(std::move(x), std::move(x), ...)) is released after its last use
    return forward_impl(q.view(), k.view(), v.view(), seq_len, kv_seq_len,
                        {&q == &k || &q == &v ? nullptr : &q, &k == &v ? nullptr : &k, &v});
  }

 private:
  result<tensor> forward_impl(const tensor_view& q, const tensor_view& k, const tensor_view& v, std::int64_t seq_len,
                              std::int64_t kv_seq_len, std::array<tensor*, 3> release) {
    constexpr const char* what = "ulysses_attention forward";
    JITEMBED_TRY(detail::check_bshd(q, what, "q", be_.device()));
    JITEMBED_TRY(detail::check_bshd(k, what, "k", be_.device()));
    JITEMBED_TRY(detail::check_bshd(v, what, "v", be_.device()));
    for (const tensor_view* t : {&q, &k, &v}) {
      if (t->size(2) != heads_) {
        return fail(errc::invalid_argument, std::string(what) + ": expected " + std::to_string(heads_) +
                                                " heads (dim 2), got " + t->shape().to_string());
      }
    }
    if (k.shape() != v.shape()) {
      return fail(errc::invalid_argument,
                  std::string(what) + ": k " + k.shape().to_string() + " and v " + v.shape().to_string() + " differ");
    }
    if (seq_len < 0) seq_len = q.size(1) * comm_.size();
    if (kv_seq_len < 0) kv_seq_len = k.shape() == q.shape() ? seq_len : k.size(1) * comm_.size();
    // capture: only what the backend throws (allocation, a device error); the rest returns its error.
    return detail::capture("ulysses_attention forward", [&]() -> result<tensor> {
      q_local_ = q.shape();
      seq_len_ = seq_len;
      kv_seq_len_ = kv_seq_len;
      be_.before_comm(comm_);
      // q, k, v are views of *release[i] when given: none is read after its owner is released
      JITEMBED_ASSIGN_OR_RETURN(qh_, try_seq_to_head(comm_, q, seq_len));
      if (release[0]) *release[0] = tensor();
      JITEMBED_ASSIGN_OR_RETURN(kh_, try_seq_to_head(comm_, k, kv_seq_len));
      if (release[1]) *release[1] = tensor();
      JITEMBED_ASSIGN_OR_RETURN(vh_, try_seq_to_head(comm_, v, kv_seq_len));
      if (release[2]) *release[2] = tensor();
      be_.after_comm(comm_);
      tensor out = be_.empty(qh_.shape(), qh_.dtype());
      saved_ = be_.attention_forward(qh_, kh_, vh_, causal_, out);
      const bool delta_later =
          detail::attention_takes_delta<B> && saved_output_ == ulysses_saved_output::exchange_delta;
      if constexpr (detail::attention_can_drop_output<B>) {  // `out` itself goes once exchanged
        if (delta_later || saved_output_ == ulysses_saved_output::recompute) be_.attention_drop_output(saved_);
      }
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor back, try_head_to_seq(comm_, out));
      be_.after_comm(comm_);
      out_seq_ = delta_later ? back : tensor();
      return back;
    });
  }

 public:
  // dout [B, Sq_r, H, D] (like forward's output) → dq, dk, dv shaped like forward's q, k, v.
  result<grads> backward(const tensor_view& dout) {
    constexpr const char* what = "ulysses_attention backward";
    if (!qh_.defined()) return fail(errc::invalid_argument, std::string(what) + ": backward() without a forward()");
    JITEMBED_TRY(detail::check_bshd(dout, what, "dout", be_.device()));
    if (dout.shape() != q_local_) {
      return fail(errc::invalid_argument,
                  std::string(what) + ": dout must be " + q_local_.to_string() + ", got " + dout.shape().to_string());
    }
    return detail::capture("ulysses_attention backward", [&]() -> result<grads> {
      tensor delta;  // exchange_delta: δ of this rank's rows, computed before the exchanges begin
      if constexpr (detail::attention_takes_delta<B>) {
        if (out_seq_.defined()) delta = be_.attention_delta(out_seq_, dout);
        out_seq_ = tensor();
      }
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor gh, try_seq_to_head(comm_, dout, seq_len_));
      if constexpr (detail::attention_takes_delta<B>) {
        if (delta.defined()) {  // to the head layout, where the local backward reads it instead of out
          JITEMBED_ASSIGN_OR_RETURN(tensor delta_h, try_seq_to_head(comm_, delta, seq_len_));
          be_.attention_use_delta(saved_, std::move(delta_h));
        }
      }
      be_.after_comm(comm_);
      tensor dq = be_.empty(qh_.shape(), qh_.dtype());
      tensor dk = be_.empty(kh_.shape(), kh_.dtype());
      tensor dv = be_.empty(vh_.shape(), vh_.dtype());
      be_.attention_backward(qh_, kh_, vh_, saved_, gh, dq, dk, dv);
      // what backward no longer needs goes before the gradients travel (the rank's peak is here)
      qh_ = kh_ = vh_ = gh = tensor();
      saved_ = {};
      be_.before_comm(comm_);
      grads g;
      JITEMBED_ASSIGN_OR_RETURN(g.dq, try_head_to_seq(comm_, dq));
      dq = tensor();
      JITEMBED_ASSIGN_OR_RETURN(g.dk, try_head_to_seq(comm_, dk));
      dk = tensor();
      JITEMBED_ASSIGN_OR_RETURN(g.dv, try_head_to_seq(comm_, dv));
      be_.after_comm(comm_);
      return g;
    });
  }

  int heads() const noexcept { return heads_; }
  int local_heads() const noexcept { return heads_ / comm_.size(); }
  bool causal() const noexcept { return causal_; }

 private:
  // Arguments checked by create().
  ulysses_attention(const C& comm, int heads, const ulysses_attention_options& opt, B backend)
      : comm_(keep_communicator(comm)),
        be_(std::move(backend)),
        heads_(heads),
        causal_(opt.causal),
        saved_output_(opt.saved_output) {}

  kept_communicator_t<C> comm_;  // a copy of the handle (or its ref() view): valid when the caller's moves
  B be_;
  int heads_;
  bool causal_;
  ulysses_saved_output saved_output_;
  shape q_local_{};
  std::int64_t seq_len_ = 0, kv_seq_len_ = 0;
  tensor qh_, kh_, vh_;  // head-sharded [B, S, H/n, D]
  tensor out_seq_;       // exchange_delta: the output forward returned, shared with the caller
  typename B::attention_saved saved_;
};

}  // namespace jitembed::parallel
