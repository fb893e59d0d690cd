// Fuzz target for the JPEG decoder: probe, then decode under small limits in several configurations
// (native, DCT-scaled + resized, cropped, gray/bgr, strict and lax, into a caller's buffer).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "jitembed/codec/jpeg.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // an invariant broke: let the fuzzer record it
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitembed;
  using namespace jitembed::codec;
  const bytes_view in(reinterpret_cast<const std::byte*>(data), size);

  decode_limits lim;
  lim.max_image_pixels = std::uint64_t{1} << 20;
  lim.max_decoded_bytes = std::uint64_t{8} << 20;
  lim.max_elements = std::uint64_t{8} << 20;

  auto info = probe_jpeg(in);
  if (info) check(info->width > 0 && info->height > 0);

  jpeg_decode_options native;
  auto a = decode_jpeg(in, native, lim);
  if (a) {
    check(info && a->shape() == shape{info->height, info->width, 3});
    // Whatever decodes must encode again.
    auto re = encode_jpeg(*a, {75, chroma_subsampling::s420});
    check(re.has_value());
  }

  jpeg_decode_options scaled;
  scaled.strict = false;
  scaled.format = pixel_format::gray;
  scaled.target_width = 33;
  scaled.target_height = 17;
  auto b = decode_jpeg(in, scaled, lim);
  if (b) check(b->shape() == shape{17, 33, 1});

  if (info && info->width > 1 && info->height > 1) {
    jpeg_decode_options crop;
    crop.strict = false;
    crop.format = pixel_format::bgr;
    crop.target_width = info->width / 2 + 1;
    crop.crop = crop_rect{1, 1, crop.target_width - 1, 1};
    auto c = decode_jpeg(in, crop, lim);
    if (c) check(c->shape()[1] == crop.target_width - 1 && c->shape()[0] == 1);

    jpeg_decode_options fast;
    fast.strict = false;
    fast.fast_dct = true;
    fast.fast_upsample = true;
    auto s = jpeg_output_shape(in, fast, lim);
    if (s) {
      tensor out = tensor::empty(*s, dtype::u8);
      (void)decode_jpeg_into(in, fast, lim, out);
    }
  }
  return 0;
}
