// Fuzz target: open untrusted bytes as a shard (trailer, index) and parse every record it lists.
#include <cstddef>
#include <cstdint>

#include "jitembed/format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitembed;
  const bytes_view in(reinterpret_cast<const std::byte*>(data), size);
  decode_limits lim;
  lim.max_record_bytes = 1 << 20;
  lim.max_fields = 64;
  lim.max_decoded_bytes = 1 << 22;
  auto s = format::shard_reader::parse(in, lim);
  if (!s) return 0;
  for (std::size_t i = 0; i < s->size() && i < 256; ++i) {
    (void)s->key(i);
    if (auto r = s->record(i)) {
      (void)r->verify();
      for (const auto& f : *r) (void)f.decode(lim);
    }
  }
  return 0;
}
