// Fuzz target: parse an untrusted record (and the same bytes as a batch) under small limits, verify it and
// decode every field; must never crash, read out of bounds or allocate past the limits.
#include <cstddef>
#include <cstdint>

#include "jitembed/format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitembed;
  const bytes_view in(reinterpret_cast<const std::byte*>(data), size);
  decode_limits lim;
  lim.max_record_bytes = 1 << 20;
  lim.max_fields = 64;
  lim.max_elements = 1 << 20;
  lim.max_decoded_bytes = 1 << 22;
  lim.max_name_bytes = 64;
  lim.max_zstd_window_log = 20;
  auto check = [&](const format::record_view& r) {
    (void)r.verify();
    for (const auto& f : r) {
      (void)f.decode(lim);
      (void)f.decode(lim, format::checksum_policy::skip);
      (void)f.text(lim, format::checksum_policy::skip);
      (void)r.find(f.name());
    }
  };
  if (auto r = format::record_view::parse(in, lim)) check(*r);
  if (auto b = format::batch_view::parse(in, lim))
    for (const auto& r : *b) check(r);
  return 0;
}
