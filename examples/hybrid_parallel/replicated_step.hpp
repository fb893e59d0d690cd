// The replicated baseline (what ZeRO-3 keeps per rank while it computes): every rank runs the whole model
// on its share of the global batch, full sequences, then one all_reduce averages the gradients. ZeRO-3 would
// also shard the parameters, gradients and optimizer state between steps; the activations, which make the
// peak at long sequences, are the same.
#pragma once

#include <string>

#include "step.hpp"

namespace hybrid {

// Every rank of `world` calls it. The rank's rows are a balanced share of the batch (as microbatches are
// cut); both modules run on a world of one (the rank alone: Ulysses and the TP layers of degree 1), so the
// rank_result carries the module peaks of a whole-sequence rank. With so.gather_for_check every rank also
// holds the global batch's loss and gradients in loss and grads (the encoder output and logits stay apart).
template <class Mode>
rank_result run_replicated_step(comm_t& world, const config& c, const tensors& p, const batch& in, step_options so,
                                Mode& mode) {
  const int n = world.size(), r = world.rank();
  if (c.batch < n) {
    throw error(errc::invalid_argument, "replicated step: batch " + std::to_string(c.batch) + " < " +
                                            std::to_string(n) + " ranks (a rank holds whole samples)");
  }
  config mine = c;
  mine.batch = microbatch_rows(c.batch, n, r);
  const std::int64_t off = microbatch_offset(c.batch, n, r);
  const batch rows{narrow(in.patches.view(), 0, off, mine.batch), narrow(in.ids.view(), 0, off, mine.batch)};
  comm_t solo = world.split(r, 0).value();
  const hybrid_plan alone = hybrid_plan::create({{"vision_encoder", strategy::replicate, 1, {0}},
                                                 {"language_model", strategy::replicate, 1, {0}}},
                                                1)
                                .value();
  const bool check = so.gather_for_check;
  so.gather_for_check = false;
  so.encoder = encoder_layout::sp;  // of degree 1: the plain encoder
  so.boundary = boundary_kind::ours;
  world.stats().reset();
  rank_result res = run_step(solo, mine, p, rows, alone, so, mode);
  // The data-parallel sync: each rank's gradients are the mean over its rows; weighted by its share of
  // the batch, their sum is the mean over the global batch. One all_reduce per tensor (part of the step).
  const float share = static_cast<float>(mine.batch) / static_cast<float>(c.batch);
  for (auto& named : res.own_grads) {
    tensor& t = named.second;
    float* d = t.view().data<float>();
    for (std::uint64_t i = 0; i < t.numel(); ++i) d[i] *= share;
    world.all_reduce(t.view(), reduce_op::sum).value();
  }
  res.rank = r;
  res.world_collectives = world.stats().total_calls();
  res.boundary_sent = res.boundary_received = 0;  // one rank holds both modules: nothing crosses
  if (!check) return res;
  // The comparison's loss (after the step): the mean over the global batch.
  tensor loss = tensor::empty({1}, dtype::f32);
  loss.view().data<float>()[0] = res.loss * share;
  world.all_reduce(loss.view(), reduce_op::sum).value();
  res.loss = loss.view().data<float>()[0];
  res.grads = res.own_grads;
  res.enc_rank = res.lm_rank = r;
  res.enc_size = res.lm_size = n;
  return res;
}

}  // namespace hybrid
