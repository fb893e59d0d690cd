// any_model: a type-erased, cheaply copyable handle to any models::model (what registries and tools hold).
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/models/model.hpp"

namespace jitembed::models {

class any_model {
 public:
  any_model() = default;
  template <model M>
    requires(!std::same_as<std::remove_cvref_t<M>, any_model>)
  any_model(M m) : impl_(std::make_shared<impl<M>>(std::move(m))) {}  // NOLINT: implicit by design

  explicit operator bool() const noexcept { return impl_ != nullptr; }

  std::string_view name() const { return impl_->name(); }
  std::string_view version() const { return impl_->version(); }
  std::string_view preprocess_key() const { return impl_->preprocess_key(); }
  modality input_modality() const { return impl_->input_modality(); }
  std::span<const tensor_meta> inputs() const { return impl_->inputs(); }
  std::span<const tensor_meta> outputs() const { return impl_->outputs(); }
  std::size_t max_batch_size() const { return impl_->max_batch_size(); }
  jitembed::device device() const { return impl_->device(); }
  result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const { return impl_->preprocess(raw, limits); }
  bool has_preprocess() const { return impl_->has_preprocess(); }
  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const { return impl_->run(batch); }

  // The wrapped model, or nullptr when it is not an M.
  template <model M>
  const M* get_if() const noexcept {
    auto* p = dynamic_cast<const impl<M>*>(impl_.get());
    return p ? &p->m : nullptr;
  }

 private:
  struct base {
    virtual ~base() = default;
    virtual std::string_view name() const = 0;
    virtual std::string_view version() const = 0;
    virtual std::string_view preprocess_key() const = 0;
    virtual modality input_modality() const = 0;
    virtual std::span<const tensor_meta> inputs() const = 0;
    virtual std::span<const tensor_meta> outputs() const = 0;
    virtual std::size_t max_batch_size() const = 0;
    virtual jitembed::device device() const = 0;
    virtual result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const = 0;
    virtual bool has_preprocess() const = 0;
    virtual result<std::vector<named_tensors>> run(std::span<const tensor> batch) const = 0;
  };
  template <class M>
  struct impl final : base {
    explicit impl(M model) : m(std::move(model)) {}
    std::string_view name() const override { return m.name(); }
    std::string_view version() const override { return m.version(); }
    std::string_view preprocess_key() const override { return m.preprocess_key(); }
    modality input_modality() const override { return m.input_modality(); }
    std::span<const tensor_meta> inputs() const override { return m.inputs(); }
    std::span<const tensor_meta> outputs() const override { return m.outputs(); }
    std::size_t max_batch_size() const override { return m.max_batch_size(); }
    jitembed::device device() const override { return m.device(); }
    result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const override { return m.preprocess(raw, limits); }
    bool has_preprocess() const override { return models::has_preprocess(m); }
    result<std::vector<named_tensors>> run(std::span<const tensor> batch) const override { return m.run(batch); }
    M m;
  };

  std::shared_ptr<const base> impl_;
};

static_assert(model<any_model>);

}  // namespace jitembed::models
