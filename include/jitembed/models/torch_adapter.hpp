// LibTorch adapter: a TorchScript module (torch::jit), an AOTInductor package (.pt2) or a C++ torch::nn module
// as a models::model, so a real VAE / CLIP / T5 plugs into the service, the cache and the precompute tool
// (component jitembed::torch).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/script.h>
#include <torch/version.h>

#include <concepts>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/detail/kernels.hpp"
#include "jitembed/models/detail/torch_backends.hpp"
#include "jitembed/models/detail/torch_convert.hpp"
#include "jitembed/models/detail/torch_cuda_staging.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

// What torch_model::open() reads: a TorchScript archive (torch.jit.save; Triton's "pytorch_libtorch" model.pt)
// or an AOTInductor package (torch._inductor.aoti_compile_and_package; model.pt2). by_extension: ".pt2" is a
// package, anything else TorchScript.
enum class torch_file_format { by_extension, torchscript, aoti_package };

// What a wrapped module is and how it is fed. Metadata is the user's: LibTorch modules do not describe
// their inputs and outputs.
struct torch_model_options {
  std::string name;                        // model name (part of every cache key); required
  std::string version;                     // the user's version ("sd-vae-ft-mse@1"): change it when the code
                                           // or batch_transform changes; weights are fingerprinted anyway
  modality input_modality = modality::image;
  // One preprocessed item, e.g. {"image", u8, {256, 256, 3}}; -1 marks an extent that may vary between
  // batches (the items of one batch must agree). run() stacks N items into [N, ...] for forward.
  tensor_meta input{"image", dtype::u8, {256, 256, 3}};
  // One item's outputs, in the order forward returns them: a Tensor fills the single output, a tuple or
  // list fills them by position, a Dict[str, Tensor] by name. forward's [N, ...] results are cast to
  // these dtypes and must have these shapes after the batch dim.
  std::vector<tensor_meta> outputs;
  std::size_t max_batch_size = 16;  // >= 1
  jitembed::device device = jitembed::device::cpu();       // the module is moved there at creation; CUDA needs a CUDA LibTorch
  bool outputs_to_cpu = true;       // copy CUDA outputs back to host memory
  bool hash_parameters = true;      // fingerprint parameters and buffers into version() (one pass at creation)
  // [N, input...] on dev -> the argument forward takes (e.g. torch_image_to_nchw_signed). Null: as is.
  std::function<torch::Tensor(const torch::Tensor&)> batch_transform;
  // Raw field bytes -> one item's input; safe to call from several threads. Null: for image models the
  // reference preprocessing (JPEG -> RGB u8 [H, W, 3], stretched to input.shape exactly as image-latent
  // does); for other modalities preprocess() fails with errc::invalid_argument (run() still works).
  std::function<result<tensor>(bytes_view, const decode_limits&)> preprocess;
  std::string preprocess_key;  // every parameter of `preprocess` (preprocess_params::str()); required with it
  // true: no preprocessing of raw bytes at all, not even the reference image one; the model is served only
  // through its declared input tensor (has_preprocess() is false). Not with `preprocess`.
  bool tensor_input_only = false;
  torch_file_format file_format = torch_file_format::by_extension;  // open() only
  // AOTInductor packages: how many run() calls execute at once (the loader's runners; more wait). >= 1
  std::size_t aoti_runners = 1;
  // AOTInductor packages: let the package check each batch against its exported shapes (fixed extents,
  // dtypes, and the batch bounds unless exported without them) so a declaration that disagrees with the
  // export is errc::internal instead of out-of-bounds reads. Inductor's only switch is the environment variable AOTI_RUNTIME_CHECK_INPUTS, read
  // once by each loaded package: open() sets it to 1 unless it is already set (set it to 0 to opt out).
  bool aoti_check_inputs = true;
};

// [N, H, W, 3] u8 -> contiguous [N, 3, H, W] f32 in [0, 1].
inline torch::Tensor torch_image_to_nchw_unit(const torch::Tensor& x) {
  return x.permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.f).contiguous();
}
// [N, H, W, 3] u8 -> contiguous [N, 3, H, W] f32 in [-1, 1] (what Stable Diffusion's VAE takes).
inline torch::Tensor torch_image_to_nchw_signed(const torch::Tensor& x) {
  return x.permute({0, 3, 1, 2}).to(torch::kFloat).div_(127.5f).sub_(1.f).contiguous();
}


// A LibTorch module as a models::model. Cheap to copy (copies share the module). run() stacks the items
// into one [N, ...] tensor (one copy per item), applies batch_transform, runs forward under
// c10::InferenceMode and hands each item views of the output tensors (zero-copy through DLPack; the views
// keep the torch tensors alive). Exceptions from LibTorch never leave run() or preprocess(): a failing
// forward is errc::internal with LibTorch's message.
//
// Only load TorchScript files you trust: a TorchScript archive is code.
class torch_model {
 public:
  // Every create / open checks the options (invalid_argument: empty name, max_batch_size 0, bad tensor_meta,
  // no or duplicate outputs, preprocess without preprocess_key, an image input the reference preprocessing
  // cannot make) and prepares the module on o.device (invalid_argument when LibTorch refuses).

  // A TorchScript module (e.g. torch::jit::load's result, or one defined in C++ with define()).
  static result<torch_model> create(torch::jit::Module m, torch_model_options o) {
    return create(std::shared_ptr<detail::torch_backend>(std::make_shared<detail::torch_script_backend>(std::move(m))),
                  std::move(o));
  }
  // A C++ torch::nn module whose forward takes one Tensor and returns a Tensor, a std::tuple of Tensors,
  // a std::vector<Tensor> or a std::unordered_map<std::string, Tensor>. A null module is invalid_argument.
  template <class M>
    requires std::derived_from<M, torch::nn::Module> && requires(M& m, torch::Tensor x) { m.forward(x); }
  static result<torch_model> create(std::shared_ptr<M> m, torch_model_options o) {
    if (!m) return fail(errc::invalid_argument, "torch_model '" + o.name + "': null module");
    return create(std::shared_ptr<detail::torch_backend>(std::make_shared<detail::torch_nn_backend<M>>(std::move(m))),
                  std::move(o));
  }
  // A module holder (torch::nn::Linear, a TORCH_MODULE type); an empty holder is invalid_argument.
  template <class Impl>
  static result<torch_model> create(const torch::nn::ModuleHolder<Impl>& m, torch_model_options o) {
    if (m.is_empty()) return fail(errc::invalid_argument, "torch_model '" + o.name + "': empty module holder");
    return create(m.ptr(), std::move(o));
  }
  // A torch::nn::AnyModule whose forward takes one Tensor and returns a Tensor; an empty one is invalid_argument.
  static result<torch_model> create(torch::nn::AnyModule m, torch_model_options o) {
    if (m.is_empty()) return fail(errc::invalid_argument, "torch_model '" + o.name + "': empty AnyModule");
    return create(std::shared_ptr<detail::torch_backend>(std::make_shared<detail::torch_any_backend>(std::move(m))),
                  std::move(o));
  }
  // A model file (o.file_format): a TorchScript archive (torch::jit::load) or an AOTInductor package
  // (torch::inductor::AOTIModelPackageLoader; its device must be o.device's, else invalid_argument).
  // errc::not_found when the file does not exist, errc::decode_failed when LibTorch rejects it (a truncated
  // file, one that is not that kind of model), with LibTorch's message.
  static result<torch_model> open(const std::filesystem::path& file, torch_model_options o) {
    std::error_code ec;
    const bool aoti = o.file_format == torch_file_format::aoti_package ||
                      (o.file_format == torch_file_format::by_extension && file.extension() == ".pt2");
    const char* kind = aoti ? "AOTInductor package" : "TorchScript file";
    if (!std::filesystem::is_regular_file(file, ec))
      return fail(errc::not_found, "torch_model '" + o.name + "': no " + kind + " " + file.string());
    if (!aoti) {
      torch::jit::Module m;
      try {
        m = torch::jit::load(file.string(), c10::Device(c10::DeviceType::CPU));
      } catch (const std::exception& e) {
        return fail(errc::decode_failed, "torch_model '" + o.name + "': cannot load " + file.string() + ": " + detail::torch_what(e));
      }
      return create(std::move(m), std::move(o));
    }
    if (o.aoti_runners < 1) return fail(errc::invalid_argument, "torch_model '" + o.name + "': aoti_runners 0");
    if (o.aoti_check_inputs) ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0);
    std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
    try {
      const c10::DeviceIndex index = o.device.is_cpu() ? -1 : static_cast<c10::DeviceIndex>(o.device.ordinal);
      loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(file.string(), "model", false, o.aoti_runners, index);
    } catch (const std::exception& e) {
      return fail(errc::decode_failed, "torch_model '" + o.name + "': cannot load the " + std::string(kind) + " " +
                                           file.string() + ": " + detail::torch_what(e));
    }
    return create(std::shared_ptr<detail::torch_backend>(std::make_shared<detail::torch_aoti_backend>(std::move(loader))),
                  std::move(o));
  }

  std::string_view name() const noexcept { return s_->opts.name; }
  // preprocess_params string: user version, parameter hash, LibTorch version, declared outputs.
  std::string_view version() const noexcept { return s_->version; }
  std::string_view preprocess_key() const noexcept { return s_->preprocess_key; }
  modality input_modality() const noexcept { return s_->opts.input_modality; }
  std::span<const tensor_meta> inputs() const noexcept { return {&s_->opts.input, 1}; }
  // Whether preprocess() makes the input from raw bytes (a preprocess callable, or the reference image one).
  bool has_preprocess() const noexcept {
    const auto& o = s_->opts;
    return o.preprocess || (o.input_modality == modality::image && !o.tensor_input_only);
  }
  std::span<const tensor_meta> outputs() const noexcept { return s_->opts.outputs; }
  std::size_t max_batch_size() const noexcept { return s_->opts.max_batch_size; }
  jitembed::device device() const noexcept { return s_->opts.device; }
  const torch_model_options& options() const noexcept { return s_->opts; }
  // XXH3-128 hex of the parameters and buffers ("" with hash_parameters off).
  std::string_view parameter_hash() const noexcept { return s_->param_hash; }

  result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const {
    const auto& o = s_->opts;
    if (o.preprocess) {
      try {
        return o.preprocess(raw, limits);
      } catch (const error& e) {
        return fail(e.code(), o.name + ": " + e.message());
      } catch (const std::exception& e) {
        return fail(errc::internal, o.name + ": preprocess threw: " + detail::torch_what(e));
      }
    }
    if (!has_preprocess())
      return fail(errc::invalid_argument, o.name + ": no preprocessing of raw " + std::string(to_string(o.input_modality)) +
                                              " bytes: send the input tensor '" + o.input.name + "'");
    codec::jpeg_decode_options jo;
    jo.target_height = static_cast<int>(o.input.shape[0]);
    jo.target_width = static_cast<int>(o.input.shape[1]);
    auto t = codec::decode_jpeg(raw, jo, limits);
    if (!t) return fail(t.code(), o.name + ": " + t.error().message);
    return t;
  }

  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    const auto& o = s_->opts;
    JITEMBED_TRY(detail::check_batch(o.name, batch, o.max_batch_size, o.input));
    std::vector<named_tensors> out(batch.size());
    if (batch.empty()) return out;
    try {
      c10::InferenceMode guard;
#if JITEMBED_TORCH_CUDA
      // A GPU model: pinned staging, the copy on this runner's copy stream, forward on its compute stream
      // (detail/torch_cuda_staging.hpp), so one instance's copy overlaps another's compute.
      std::optional<c10::cuda::CUDAGuard> on_device;
      std::optional<c10::cuda::CUDAStreamGuard> on_compute;
      detail::cuda_stream_pair* streams = nullptr;
      if (s_->torch_dev.is_cuda()) {
        on_device.emplace(s_->torch_dev);
        streams = &detail::thread_streams(s_->torch_dev.index());
        on_compute.emplace(streams->compute);
      }
      auto x = streams ? detail::stage_to_device(o.name, batch, o.input, s_->torch_dev, *streams)
                       : detail::stack_items(o.name, batch, o.input, s_->torch_dev);
#else
      auto x = detail::stack_items(o.name, batch, o.input, s_->torch_dev);
#endif
      if (!x) return x.error();
      torch::Tensor arg = o.batch_transform ? o.batch_transform(*x) : std::move(*x);
      const c10::IValue y = s_->backend->forward(std::move(arg));
      auto ys = detail::unpack_outputs(o.name, y, o.outputs);
      if (!ys) return ys.error();
#if JITEMBED_TORCH_CUDA
      if (streams) {
        // Every output into pinned host memory, then one wait; device outputs (outputs_to_cpu false) wait
        // too: their reader runs on another stream than the compute stream that writes them.
        if (o.outputs_to_cpu)
          for (std::size_t k = 0; k < ys->size(); ++k) (*ys)[k] = detail::output_to_pinned_host((*ys)[k], o.outputs[k]);
        streams->compute.synchronize();
      }
#endif
      for (std::size_t k = 0; k < ys->size(); ++k) {
        auto items = detail::split_output(o.name, std::move((*ys)[k]), o.outputs[k], batch.size(), o.outputs_to_cpu);
        if (!items) return items.error();
        for (std::size_t i = 0; i < batch.size(); ++i) out[i].emplace_back(o.outputs[k].name, std::move((*items)[i]));
      }
    } catch (const error& e) {
      return fail(e.code(), o.name + ": " + e.message());
    } catch (const std::exception& e) {
      return fail(errc::internal, o.name + ": forward failed: " + detail::torch_what(e));
    }
    return out;
  }

 private:
  struct state {
    torch_model_options opts;
    std::shared_ptr<detail::torch_backend> backend;
    c10::Device torch_dev{c10::DeviceType::CPU};
    std::string version, preprocess_key, param_hash;
  };

  static result<void> check_meta(const std::string& who, const tensor_meta& m, bool item_input) {
    if (m.name.empty()) return fail(errc::invalid_argument, who + ": a tensor_meta has an empty name");
    if (m.shape.size() + 1 > kMaxDims)
      return fail(errc::invalid_argument, who + ": '" + m.name + "' rank " + std::to_string(m.shape.size()) + " > " +
                                              std::to_string(kMaxDims - 1) + " (the batch dim is added)");
    for (auto d : m.shape)
      if (d < -1 || (item_input && d == 0))
        return fail(errc::invalid_argument, who + ": '" + m.name + "' has extent " + std::to_string(d));
    if (element_size(m.type) == 0) return fail(errc::invalid_argument, who + ": '" + m.name + "' has an invalid dtype");
    return {};
  }

  // The public create()s end here, with their module wrapped in a backend.
  static result<torch_model> create(std::shared_ptr<detail::torch_backend> backend, torch_model_options o) {
    const std::string who = "torch_model '" + o.name + "'";
    if (o.name.empty()) return fail(errc::invalid_argument, "torch_model: empty name");
    if (o.max_batch_size < 1) return fail(errc::invalid_argument, who + ": max_batch_size 0");
    JITEMBED_TRY(check_meta(who, o.input, true));
    if (o.outputs.empty()) return fail(errc::invalid_argument, who + ": no outputs declared");
    std::set<std::string> names;
    for (const auto& m : o.outputs) {
      JITEMBED_TRY(check_meta(who, m, false));
      if (!names.insert(m.name).second) return fail(errc::invalid_argument, who + ": output '" + m.name + "' declared twice");
    }
    auto s = std::make_shared<state>();
    if (o.preprocess && o.tensor_input_only)
      return fail(errc::invalid_argument, who + ": preprocess is set with tensor_input_only");
    if (o.preprocess) {
      if (o.preprocess_key.empty())
        return fail(errc::invalid_argument, who + ": preprocess is set but preprocess_key is empty");
      s->preprocess_key = o.preprocess_key;
    } else if (o.input_modality == modality::image && !o.tensor_input_only) {
      const auto& sh = o.input.shape;
      if (o.input.type != dtype::u8 || sh.size() != 3 || sh[2] != 3 || sh[0] < 1 || sh[1] < 1 || sh[0] > 65535 ||
          sh[1] > 65535)
        return fail(errc::invalid_argument, who + ": the reference image preprocessing makes u8 [H, W, 3], input '" +
                                                o.input.name + "' is " + std::string(to_string(o.input.type)) +
                                                detail::shape_string(sh) + " (set preprocess)");
      preprocess_params p;
      if (sh[0] == sh[1]) {
        p.set("bucket", sh[0]);
      } else {
        p.set("bucket", {sh[0], sh[1]});
      }
      s->preprocess_key = p.set("decode", "turbojpeg-rgb-strict").set("resize", "dct-pow2+bilinear-aa-stretch").str();
    } else {
      s->preprocess_key = preprocess_params{}.set("preprocess", "none").str();
    }
    try {
      if (o.hash_parameters) s->param_hash = detail::hash_named_tensors(backend->state());
      s->torch_dev = detail::to_torch_device(o.device);
      backend->prepare(s->torch_dev);
    } catch (const std::exception& e) {
      return fail(errc::invalid_argument, who + ": cannot prepare the module: " + detail::torch_what(e));
    }
    std::string outs;
    for (const auto& m : o.outputs)
      outs += (outs.empty() ? "" : ",") + m.name + ":" + std::string(to_string(m.type)) + detail::shape_string(m.shape);
    preprocess_params v;
    v.set("user", o.version).set("torch", TORCH_VERSION).set("outputs", outs);
    if (!s->param_hash.empty()) v.set("params", s->param_hash);
    s->version = v.str();
    s->backend = std::move(backend);
    s->opts = std::move(o);
    return torch_model(std::move(s));
  }

  explicit torch_model(std::shared_ptr<const state> s) : s_(std::move(s)) {}
  std::shared_ptr<const state> s_;
};

static_assert(model<torch_model>);

}  // namespace jitembed::models
