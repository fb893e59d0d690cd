// An outside project using the installed package: encodes a JPEG and an MP4 and decodes them back.
#include <jitembed/codec/jpeg.hpp>
#include <jitembed/codec/video.hpp>
#include <jitembed/core/hash.hpp>

#include <cstdio>

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
  return back.shape() == img.shape() && info.frame_count == 4 ? 0 : 1;
}
