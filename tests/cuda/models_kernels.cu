// nvcc-compiled half of the CUDA model tests: wraps models/cuda/*.cuh behind host functions.
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/models/cuda/image_latent.cuh"
#include "jitembed/models/cuda/kernels.cuh"
#include "jitembed/models/cuda/text_embed.cuh"
#include "jitembed/models/cuda/video_latent.cuh"
#include "models_kernels.hpp"

namespace jitembed::models::cuda_test {

void image_latent_replay(const tensor& rgb, float* out) {
  detail::image_latent_replay(rgb.data<std::uint8_t>(), rgb.size(0), rgb.size(1), out);
}

std::uint64_t xxh3_64_short(const std::uint8_t* p, std::uint32_t len, std::uint64_t seed) { return detail::xxh3_64_short(p, len, seed); }

void text_embed_replay(const text_embed& m, const tensor& tokens, std::vector<float>& sequence, std::vector<float>& pooled) {
  const auto& o = m.options();
  const detail::text_params prm{o.max_length, o.dim, o.ngram_min, o.ngram_max, o.hash_buckets, o.seed};
  std::vector<std::uint8_t> tok(static_cast<std::size_t>(o.max_length), 0);
  for (std::int64_t p = 0; p < tokens.size(0); ++p) tok[static_cast<std::size_t>(p)] = static_cast<std::uint8_t>(tokens.data<std::int32_t>()[p]);
  sequence.assign(static_cast<std::size_t>(o.max_length) * static_cast<std::size_t>(o.dim), -1.f);
  pooled.assign(static_cast<std::size_t>(o.dim), -1.f);
  detail::text_embed_replay(tok.data(), tokens.size(0), m.projection_row(0).data(), prm, sequence.data(), pooled.data());
}

namespace {
template <class M>
model_info info_of(const M& m) {
  return {std::string(m.name()), std::string(m.version()), std::string(m.preprocess_key()), m.device()};
}
}  // namespace

result<model_info> image_info(const image_latent_options& o) {
  auto m = cuda_image_latent::create(o);
  if (!m) return fail(m.code(), m.error().message);
  return info_of(*m);
}
result<model_info> video_info(const video_latent_options& o) {
  auto m = cuda_video_latent::create(o);
  if (!m) return fail(m.code(), m.error().message);
  return info_of(*m);
}
result<model_info> text_info(const text_embed_options& o) {
  auto m = cuda_text_embed::create(o);
  if (!m) return fail(m.code(), m.error().message);
  return info_of(*m);
}

result<std::vector<named_tensors>> run_image(const image_latent_options& o, std::span<const tensor> batch) {
  auto m = cuda_image_latent::create(o);
  if (!m) return fail(m.code(), m.error().message);
  return m->run(batch);
}
result<std::vector<named_tensors>> run_video(const video_latent_options& o, std::span<const tensor> batch) {
  auto m = cuda_video_latent::create(o);
  if (!m) return fail(m.code(), m.error().message);
  return m->run(batch);
}
result<std::vector<named_tensors>> run_text(const text_embed_options& o, std::span<const tensor> batch) {
  auto m = cuda_text_embed::create(o);
  if (!m) return fail(m.code(), m.error().message);
  return m->run(batch);
}

error_info call_image_latent_cuda(const tensor_view& rgb, const tensor_view& latent) {
  try {
    image_latent_cuda(rgb, latent, cuda::stream_ref{});
    return {errc::ok, ""};
  } catch (const error& e) {
    return {e.code(), e.message()};
  }
}

error_info call_video_latent_cuda(const tensor_view& frames, const tensor_view& latent, const tensor_view& scratch) {
  try {
    video_latent_cuda(frames, latent, scratch, cuda::stream_ref{});
    return {errc::ok, ""};
  } catch (const error& e) {
    return {e.code(), e.message()};
  }
}

tensor image_latent_on_device(const tensor& rgb, dtype out) {
  auto s = cuda::stream::create().value();
  const shape out_shape{rgb.size(0), 4, rgb.size(1) / 8, rgb.size(2) / 8};
  tensor host = tensor::empty(out_shape, out);
  {
    tensor d_in = cuda::empty_device(rgb.shape(), dtype::u8, s);
    tensor d_out = cuda::empty_device(out_shape, out, s);
    cuda::copy_async(d_in, rgb, s);
    image_latent_cuda(d_in, d_out, s);
    cuda::copy_async(host, d_out, s);
    s.synchronize();
  }
  s.synchronize();
  return host;
}

}  // namespace jitembed::models::cuda_test
