// Fuzz target: untrusted bodies into the KServe v2 request and response decoders (JSON header + binary
// extension); what decodes is re-encoded and decoded again, and must give the same tensors.
// Input: byte 0 = mode (bit 0: response, bit 1: Inference-Header-Content-Length present),
// bytes 1..2 = header length (little endian), the rest = the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "jitembed/net/kserve.hpp"

namespace {

using namespace jitembed;
using namespace jitembed::net::kserve;

std::size_t touch(const infer_tensor& t) {
  std::size_t sum = 0;
  for (auto b : t.data) sum += static_cast<std::size_t>(b);  // reads every byte: a bad view shows under ASan
  if (t.type == datatype::bytes) {
    if (auto s = t.strings()) {
      for (auto e : *s) sum += e.size();
    }
  } else if (auto v = t.as_tensor_view()) {
    sum += v->nbytes();
  }
  return sum;
}

bool same(const infer_tensor& a, const infer_tensor& b) {
  return a.name == b.name && a.type == b.type && a.shape == b.shape && a.data.size() == b.data.size() &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0);
}

template <class Message, class Decode>
void roundtrip(const Message& m, const std::vector<infer_tensor>& tensors, Decode decode, const protocol_limits& lim,
               bool response) {
  result<encoded_message> enc = [&] {
    if constexpr (std::is_same_v<Message, infer_request>) {
      (void)response;
      return encode_request(m);
    } else {
      return encode_response(m);
    }
  }();
  if (!enc) return;  // e.g. a JSON float that overflowed FP32 cannot be written back as JSON
  const std::string body = enc->flatten();
  protocol_limits wide = lim;
  wide.max_body_bytes = wide.max_header_bytes = std::size_t{1} << 26;  // JSON numbers may grow when rewritten
  auto again = decode(body, enc->header_length, wide);
  if (!again) std::abort();
  const auto& back = [&]() -> const std::vector<infer_tensor>& {
    if constexpr (std::is_same_v<Message, infer_request>) {
      return again->inputs;
    } else {
      return again->outputs;
    }
  }();
  if (back.size() != tensors.size()) std::abort();
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!same(back[i], tensors[i])) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t mode = data[0];
  const std::size_t hlen = static_cast<std::size_t>(data[1]) | static_cast<std::size_t>(data[2]) << 8;
  const std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
  const std::optional<std::size_t> header_length = (mode & 2) ? std::optional<std::size_t>(hlen) : std::nullopt;

  protocol_limits lim;
  lim.max_body_bytes = 1 << 20;
  lim.max_header_bytes = 1 << 18;
  lim.max_bytes_elements = 1 << 16;

  volatile std::size_t sink = 0;
  if (mode & 1) {
    auto r = decode_response(body, header_length, lim);
    if (!r) {
      sink = sink + error_body(to_protocol_error(r.error())).size();
      return 0;
    }
    for (const auto& t : r->outputs) sink = sink + touch(t);
    roundtrip(*r, r->outputs, [](std::string_view b, std::optional<std::size_t> h, const protocol_limits& l) { return decode_response(b, h, l); },
              lim, true);
  } else {
    auto r = decode_request(body, header_length, lim);
    if (!r) {
      sink = sink + error_body(to_protocol_error(r.error())).size();
      return 0;
    }
    for (const auto& t : r->inputs) sink = sink + touch(t);
    sink = sink + priority(*r) + binary_data_output(*r);
    for (const auto& o : r->outputs) sink = sink + wants_binary(*r, o.name, datatype::fp32);
    roundtrip(*r, r->inputs, [](std::string_view b, std::optional<std::size_t> h, const protocol_limits& l) { return decode_request(b, h, l); },
              lim, false);
  }
  return 0;
}
