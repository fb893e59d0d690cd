// Fuzz target: untrusted bytes into the zstd codec (with and without shuffle, growing and exact-size
// decoding), the text codec and the token decoder, all under small limits.
// Input: byte 0 = mode bits, bytes 1..2 = exact output size (little endian), the rest = the payload.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitembed;
  using namespace jitembed::codec;
  if (size < 3) return 0;
  const std::uint8_t mode = data[0];
  const std::size_t exact = static_cast<std::size_t>(data[1]) | static_cast<std::size_t>(data[2]) << 8;
  const bytes_view in(reinterpret_cast<const std::byte*>(data + 3), size - 3);

  decode_limits lim;
  lim.max_decoded_bytes = 1 << 20;
  lim.max_elements = 1 << 20;
  lim.max_zstd_window_log = 20;

  static constexpr std::size_t shuffles[] = {0, 2, 4, 8};
  zstd_options o;
  o.shuffle = shuffles[mode & 3];
  const zstd_codec c(o);

  // Every decoded byte is read, so a wrong length or uninitialised output shows under the sanitizers.
  unsigned sink = 0;
  switch ((mode >> 2) & 3) {
    case 0: {
      auto t = c.decode(in, lim);
      if (t) {
        if (t->dtype() != dtype::u8 || t->nbytes() > lim.max_decoded_bytes) std::abort();
        for (auto b : t->bytes()) sink += static_cast<unsigned>(b);
      }
      break;
    }
    case 1: {
      std::vector<std::byte> out(exact);
      auto n = c.decompress_into(in, out, lim);
      if (n && *n != exact) std::abort();
      break;
    }
    case 2: {
      auto s = decode_text(in, lim);
      if (s) {
        if (!validate_utf8(*s)) std::abort();
        for (char ch : *s) sink += static_cast<unsigned char>(ch);
      }
      (void)validate_utf8(in);
      break;
    }
    default: {
      const dtype t = (mode & 16) ? dtype::i64 : dtype::i32;
      auto ids = decode_tokens(in, t, lim);
      if (ids && (ids->dtype() != t || ids->nbytes() % element_size(t) != 0)) std::abort();
      break;
    }
  }
  volatile unsigned keep = sink;
  (void)keep;
  return 0;
}
