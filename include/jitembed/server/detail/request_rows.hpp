// A decoded inference request's rows, checked against the model it names: raw fields to preprocess, the
// model's declared input split into items, or token ids (server/detail/pipeline.hpp runs them).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/server/detail/answers.hpp"
#include "jitembed/server/model_instance.hpp"

namespace jitembed::server::detail {

// A request's rows: raw fields to preprocess, or the model's input items as they came.
struct request_rows {
  std::vector<std::string_view> raw;
  std::vector<tensor> items;
  std::size_t count() const noexcept { return items.empty() ? raw.size() : items.size(); }
};

// One request against one model version; the rows of one request are at most `max_rows`.
struct row_checker {
  const model_instance& inst;
  const net::kserve::infer_request& req;
  std::uint64_t max_rows;

  // The rows of the request, by the input it sends (as metadata_of() publishes): one BYTES input named as
  // the model's modality or "sample" (raw fields to preprocess); the model's declared input [batch, dims...];
  // or, for a text model of token ids, "input_ids" INT64/INT32 [batch, L] (+ "attention_mask", else all ones).
  result<request_rows> check() const {
    const auto& m = inst.model();
    for (const auto& o : req.outputs) {
      const auto outs = m.outputs();
      if (std::none_of(outs.begin(), outs.end(), [&](const models::tensor_meta& t) { return t.name == o.name; }))
        return fail(errc::invalid_argument,
                    "unknown output '" + o.name + "' requested from model '" + inst.name() + "'");
    }
    if (req.inputs.empty())
      return fail(errc::invalid_argument, "model '" + inst.name() + "': the request has no inputs");
    const auto& in = req.inputs.front();
    const std::string_view modality_name = input_name(m.input_modality());
    const models::tensor_meta& declared = m.inputs().front();
    if (req.inputs.size() == 1 && in.type == net::kserve::datatype::bytes &&
        (in.name == modality_name || in.name == "sample")) {
      if (!m.has_preprocess())
        return fail(errc::invalid_argument, "model '" + inst.name() + "' has no preprocessing of raw " +
                                                std::string(modality_name) +
                                                " (its config sets no 'modality'): " + expected_inputs(m));
      JITEMBED_TRY(check_batch(in));
      request_rows rows;
      JITEMBED_ASSIGN_OR_RETURN(rows.raw, in.strings());
      return rows;
    }
    if (req.inputs.size() == 1 && in.name == declared.name)
      return tensor_rows(in, declared, m.has_preprocess() && in.name == modality_name);
    if (const auto ids = token_id_layout(m); ids && std::any_of(req.inputs.begin(), req.inputs.end(),
                                                                [](const auto& t) { return t.name == "input_ids"; }))
      return token_id_rows(req, *ids, m);
    if (req.inputs.size() != 1)
      return fail(errc::invalid_argument, "model '" + inst.name() + "' expects 1 input, got " +
                                              std::to_string(req.inputs.size()) + ": " + expected_inputs(m));
    if (in.name == modality_name || in.name == "sample")
      return fail(errc::dtype_mismatch, "input '" + in.name + "' has datatype " +
                                            std::string(net::kserve::to_string(in.type)) + ", expected BYTES");
    return fail(errc::invalid_argument,
                "unexpected input '" + in.name + "' for model '" + inst.name() + "': " + expected_inputs(m));
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
    if (static_cast<std::uint64_t>(rows) > max_rows)
      return fail(errc::limit_exceeded, "input '" + in.name + "': " + std::to_string(rows) +
                                            " rows > max_rows_per_request " +
                                            std::to_string(max_rows));
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
};

}  // namespace jitembed::server::detail
