// Fuzz target for the video codec: probe, then decode two frames (by stride and by timestamp) of
// arbitrary bytes under small limits. Must never crash, hang or return a tensor of the wrong shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <jitembed/codec/video.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitembed;
  using namespace jitembed::codec;
  decode_limits lim;
  lim.max_record_bytes = 1 << 20;
  lim.max_image_pixels = 1 << 18;
  lim.max_video_frames = 16;
  lim.max_decoded_bytes = 1 << 22;
  const bytes_view in(reinterpret_cast<const std::byte*>(data), size);

  auto info = probe_video(in, lim);
  if (info && (info->width <= 0 || info->height <= 0 || info->frame_count < 0)) std::abort();

  video_decode_options by_stride;
  by_stride.num_frames = 2;
  by_stride.threads = 1;
  if (auto t = decode_video(in, by_stride, lim)) {
    if (t->rank() != 4 || t->size(0) != 2 || t->size(3) != 3 || !info) std::abort();
    if (t->size(1) != info->height || t->size(2) != info->width) std::abort();
  }

  video_decode_options by_time;
  by_time.timestamps = {0.5, 0.0};
  by_time.width = 32;
  by_time.height = 24;
  by_time.threads = 1;
  if (auto t = decode_video(in, by_time, lim)) {
    if (!(t->shape() == shape{2, 24, 32, 3})) std::abort();
  }
  return 0;
}
