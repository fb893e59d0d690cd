// decode_limits: the explicit bounds every decoder checks before it allocates.
#pragma once

#include <cstdint>

namespace jitembed {

// Every field is an upper bound on what untrusted input may make a decoder allocate or do.
// Defaults suit one training sample (a large image, a short clip, a long caption).
struct decode_limits {
  std::uint64_t max_record_bytes = std::uint64_t{1} << 31;   // one encoded record / container
  std::uint32_t max_fields = 1024;                           // fields in one sample record
  std::uint32_t max_dims = 8;                                // tensor rank
  std::uint64_t max_elements = std::uint64_t{1} << 30;       // elements of one decoded tensor
  std::uint64_t max_decoded_bytes = std::uint64_t{1} << 31;  // bytes of one decoded payload
  std::uint64_t max_image_pixels = std::uint64_t{1} << 27;   // width * height of one image (134 Mpx)
  std::uint32_t max_video_frames = 4096;                     // frames decoded from one clip
  std::uint32_t max_zstd_window_log = 27;                    // zstd window (128 MiB)
  std::uint32_t max_name_bytes = 256;                        // a field name
};

}  // namespace jitembed
