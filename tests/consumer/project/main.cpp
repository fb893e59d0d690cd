// An outside project using the installed package (COMPONENTS jpeg video gloo): encodes a JPEG and an MP4 and decodes them back.
#include <jitembed/codec/jpeg.hpp>
#include <jitembed/codec/video.hpp>
#include <jitembed/core/hash.hpp>
#include <jitembed/parallel/gloo.hpp>

#include <cstdio>

// Linked through jitembed::jitembed after find_package(... COMPONENTS jpeg video gloo): exactly those
// components and what they need.
#if !defined(JITEMBED_HAS_JPEG) || !defined(JITEMBED_HAS_VIDEO) || !defined(JITEMBED_HAS_GLOO) || !defined(JITEMBED_HAS_PARALLEL)
#error "the umbrella must link the components found by find_package"
#endif
#if defined(JITEMBED_HAS_ZSTD) || defined(JITEMBED_HAS_FORMAT) || defined(JITEMBED_HAS_MODELS) || defined(JITEMBED_HAS_HTTP)
#error "the umbrella links a component that was not asked for"
#endif

int main() {
  using namespace jitembed;
  tensor img = tensor::zeros({32, 48, 3}, dtype::u8);
  for (std::size_t i = 0; i < img.nbytes(); ++i) img.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 7);
  auto jpeg = codec::encode_jpeg(img, {}).value();
  auto back = codec::decode_jpeg(jpeg, {}, decode_limits{}).value();
  tensor clip = tensor::zeros({4, 32, 48, 3}, dtype::u8);
  auto mp4 = codec::encode_video(clip, {}).value();
  auto info = codec::probe_video(mp4, decode_limits{}).value();
  std::printf("consumer: jpeg %zu bytes -> %s, mp4 %zu bytes, %lld frames, hash %s\n", jpeg.size(),
              back.shape().to_string().c_str(), mp4.size(), static_cast<long long>(info.frame_count),
              xxh3_128(jpeg).to_hex().c_str());
  // A one-rank Gloo communicator on loopback (the parallel + gloo components and their dependencies).
  auto comm = parallel::gloo_communicator::create(parallel::shared_store(parallel::hash_store()), 0, 1).value();
  float x = 2.5f;
  comm.all_reduce(tensor_view(&x, dtype::f32, shape{1}), parallel::reduce_op::sum).value();
  std::printf("consumer: gloo all_reduce on %d rank: %g\n", comm.size(), static_cast<double>(x));
  return back.shape() == img.shape() && info.frame_count == 4 && x == 2.5f ? 0 : 1;
}
