// Megatron's vocab-parallel embedding (table sharded by vocabulary rows), with a sequence-parallel variant.
// Conventions of all tensor-parallel layers: jitembed/parallel/tensor_parallel.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "jitembed/parallel/backend.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/detail/tp_common.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/shard.hpp"
#include "jitembed/nn/embedding.hpp"

namespace jitembed::parallel {

// Embedding table sharded by vocabulary rows: rank r holds rows [r·V/n, (r+1)·V/n). forward(ids) takes the
// replicated ids (i64 [...], every id in [0, V)); ids outside the local range give zero rows, and the partial
// outputs [..., hidden] are all-reduced (or, with sequence_parallel, reduce-scattered along seq_dim of the
// ids / output). backward(dout) (with SP: this rank's sequence shard, all-gathered) scatter-adds into the
// local shard's gradient only.
// The math runs on B (backend.hpp): ids i64 on B's device, the table in B's dtype, its gradient f32. On the
// CPU every id is checked against [0, V); on a device the ids are not read back (no host wait): an id
// outside [0, V) then gives a zero row on every rank.
struct vocab_parallel_embedding_options {
  bool sequence_parallel = false;  // the output reduce-scattered along seq_dim of the ids
  std::size_t seq_dim = 0;
};

template <keepable_communicator C, math_backend B = cpu_backend>
class vocab_parallel_embedding {
 public:
  // invalid_argument: this rank outside comm's group, vocab not divisible by the group size, hidden < 1;
  // resource_exhausted when the table cannot be allocated. The layer keeps a copy of comm
  // (keep_communicator): moving comm afterwards leaves the layer valid.
  static result<vocab_parallel_embedding> create(const C& comm, std::int64_t vocab, std::int64_t hidden,
                                                 vocab_parallel_embedding_options opt = {}, B backend = B()) {
    const std::string what = "vocab_parallel_embedding";
    JITEMBED_TRY(detail::tp_check_group(comm.valid(), what));
    JITEMBED_TRY(detail::tp_check_divisible(vocab, "vocab", comm.size(), what));
    JITEMBED_TRY(detail::tp_check_divisible(hidden, "hidden", 1, what));
    // The backend allocates the table and throws when it cannot (bad_alloc, a CUDA error).
    return detail::capture("vocab_parallel_embedding", [&] {
      return vocab_parallel_embedding(comm, vocab, hidden, opt, std::move(backend));
    });
  }

  result<tensor> forward(const tensor_view& ids) {
    const std::string what = "vocab_parallel_embedding forward";
    JITEMBED_TRY(detail::tp_require_on(ids, be_.device(), dtype::i64, what, "ids"));
    if (sp_) {
      if (seq_dim_ >= ids.rank()) {
        return detail::tp_invalid(what, "sequence dim " + std::to_string(seq_dim_) + " outside ids " + ids.shape().to_string());
      }
      JITEMBED_TRY(detail::tp_check_seq_divisible(ids.size(seq_dim_), seq_dim_, comm_.size(), what));
    }
    if (ids.device().is_cpu()) {
      const std::int64_t* id = ids.data<const std::int64_t>();
      const auto count = static_cast<std::int64_t>(ids.numel());
      for (std::int64_t i = 0; i < count; ++i) {
        if (id[i] < 0 || id[i] >= vocab_) {
          return detail::tp_invalid(what, "id " + std::to_string(id[i]) + " at index " + std::to_string(i) +
                                              " outside [0, " + std::to_string(vocab_) + ")");
        }
      }
    }
    // capture: only what the backend throws (allocation, a device error); the rest returns its error.
    return detail::capture("vocab_parallel_embedding forward", [&]() -> result<tensor> {
      shape s = ids.shape();
      s.push_back(hidden_);
      tensor out = be_.empty(s, be_.dtype());
      be_.embedding_forward(ids, weight_, start_, out);  // another rank's row: zero here
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(ids_, detail::copy_on(comm_, ids));
      // out stays alive past after_comm (see column_parallel_linear::backward).
      tensor y = out;
      if (sp_) {
        JITEMBED_ASSIGN_OR_RETURN(y, reduce_scatter_to_sp::try_forward(comm_, out, seq_dim_));
      } else {
        JITEMBED_TRY(detail::all_reduce_in_place(comm_, out));  // reduce_from_tp
      }
      be_.after_comm(comm_);
      return y;
    });
  }

  result<void> backward(const tensor_view& dout) {
    const std::string what = "vocab_parallel_embedding backward";
    if (!ids_.defined()) return detail::tp_invalid(what, "backward() without a forward()");
    JITEMBED_TRY(detail::tp_require_on(dout, be_.device(), be_.dtype(), what, "dout"));
    shape want = ids_.shape();
    want.push_back(hidden_);
    if (sp_) want[seq_dim_] /= comm_.size();
    JITEMBED_TRY(detail::tp_check_shape(dout, want, what, "dout"));
    return detail::capture("vocab_parallel_embedding backward", [&]() -> result<void> {
      tensor full;
      if (sp_) {
        be_.before_comm(comm_);
        JITEMBED_ASSIGN_OR_RETURN(full, reduce_scatter_to_sp::try_backward(comm_, dout, seq_dim_));
        be_.after_comm(comm_);
      }
      be_.embedding_backward(ids_, sp_ ? full.view() : dout, start_, grad_weight_);
      ids_ = tensor();
      return {};
    });
  }

  // Takes this rank's rows of a full [vocab, hidden] table.
  void load_full(const tensor_view& full_weight) {
    const std::string what = "vocab_parallel_embedding load_full";
    detail::tp_require(full_weight, dtype::f32, what, "weight").value();
    detail::tp_check_shape(full_weight, shape{vocab_, hidden_}, what, "weight").value();
    weight_ = be_.upload(local_chunk(full_weight, 0, comm_.size(), comm_.rank()));
  }

  const tensor& weight() const noexcept { return weight_; }            // [vocab/n, hidden]
  const tensor& grad_weight() const noexcept { return grad_weight_; }  // [vocab/n, hidden]
  void zero_grad() { be_.zero(grad_weight_); }
  // The whole [vocab, hidden] gradient on every rank (one all_gather).
  result<tensor> full_grad_weight() {
    return detail::capture("vocab_parallel_embedding full_grad_weight", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor g, detail::gather_rows_or_copy(comm_, grad_weight_, 0, vocab_));
      be_.after_comm(comm_);
      return g;
    });
  }

  std::int64_t vocab() const noexcept { return vocab_; }
  std::int64_t hidden() const noexcept { return hidden_; }
  std::int64_t vocab_start() const noexcept { return start_; }  // first global id of the local shard
  std::int64_t local_vocab() const noexcept { return local_vocab_; }
  bool sequence_parallel() const noexcept { return sp_; }
  std::size_t seq_dim() const noexcept { return seq_dim_; }

 private:
  // Arguments checked by create().
  vocab_parallel_embedding(const C& comm, std::int64_t vocab, std::int64_t hidden,
                           const vocab_parallel_embedding_options& opt, B backend)
      : comm_(keep_communicator(comm)), be_(std::move(backend)), vocab_(vocab), hidden_(hidden),
        sp_(opt.sequence_parallel), seq_dim_(opt.seq_dim) {
    local_vocab_ = vocab_ / comm.size();
    start_ = local_vocab_ * comm.rank();
    weight_ = be_.zeros(shape{local_vocab_, hidden_}, be_.dtype());
    grad_weight_ = be_.zeros(shape{local_vocab_, hidden_}, dtype::f32);
  }

  kept_communicator_t<C> comm_;  // a copy of the handle (or its ref() view): valid when the caller's moves
  B be_;
  std::int64_t vocab_, hidden_, local_vocab_ = 0, start_ = 0;
  bool sp_;
  std::size_t seq_dim_;
  tensor weight_, grad_weight_;
  tensor ids_;  // saved by forward
};

}  // namespace jitembed::parallel
