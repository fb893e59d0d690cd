// Strict base64 (RFC 4648, standard alphabet, '=' padding) decoding of the short binary values that
// Triton's HTTP API sends as {"b64": "..."} (a CUDA IPC handle).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace jitembed::server::detail {

// The bytes `text` encodes; nullopt when it is not base64 (a length not a multiple of 4, a character
// outside the alphabet, padding anywhere but at the end, non-zero bits left over before the padding).
inline std::optional<std::vector<std::byte>> decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  std::vector<std::byte> out;
  out.reserve(text.size() / 4 * 3);
  unsigned acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < text.size() - pad; ++i) {
    const int v = value(text[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::byte>((acc >> bits) & 0xFFu));
    }
  }
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;  // a non-canonical last character
  return out;
}

}  // namespace jitembed::server::detail
