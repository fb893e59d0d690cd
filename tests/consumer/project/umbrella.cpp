// The umbrella without a component list: <jitembed/jitembed.hpp> sees every umbrella component.
#include <jitembed/jitembed.hpp>

#include <cstdio>

#if !defined(JITEMBED_HAS_FORMAT) || !defined(JITEMBED_HAS_SERVER) || !defined(JITEMBED_HAS_JPEG)
#error "jitembed::jitembed without COMPONENTS must bring every installed umbrella component"
#endif
#if defined(JITEMBED_HAS_TORCH)
#error "torch is not in the umbrella unless named"
#endif

int main() {
  using namespace jitembed;
  tensor img = tensor::zeros({16, 16, 3}, dtype::u8);
  auto jpeg = codec::encode_jpeg(img, {}).value();
  byte_buffer out(codec::zstd_codec::compress_bound(jpeg.size()));
  auto n = codec::zstd_codec{}.compress(bytes_view(jpeg.data(), jpeg.size()), mutable_bytes(out.data(), out.size()));
  std::printf("consumer (umbrella): jpeg %zu bytes, zstd frame %zu bytes\n", jpeg.size(), n.value());
  return 0;
}
