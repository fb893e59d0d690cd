// Fuzz target: parse an untrusted tar as a WebDataset shard and build a record from every sample.
#include <cstddef>
#include <cstdint>

#include "jitembed/format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitembed;
  const bytes_view in(reinterpret_cast<const std::byte*>(data), size);
  decode_limits lim;
  lim.max_record_bytes = 1 << 20;
  lim.max_fields = 64;
  lim.max_name_bytes = 64;
  auto r = format::webdataset_reader::parse(in, lim);
  if (!r) return 0;
  for (const auto& s : *r) {
    auto b = s.to_record();
    if (!b) continue;
    auto rec = b->finish();
    if (rec) (void)format::record_view::parse(*rec, lim);
  }
  return 0;
}
