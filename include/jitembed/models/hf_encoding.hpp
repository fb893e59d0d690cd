// The values of the Hugging Face tokenizer (models/hf_tokenizer.hpp): an encoding, truncation and padding settings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jitembed::models {

// What encode() returns: all three have the same length.
struct hf_encoding {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> attention_mask;  // 1 for a token, 0 for padding
  std::vector<std::int64_t> type_ids;
};

// Truncation as `tokenizers`' enable_truncation: max_length counts the post-processor's special tokens.
struct hf_truncation {
  enum class strategy : std::uint8_t { longest_first, only_first, only_second };
  enum class side : std::uint8_t { right, left };
  std::size_t max_length = 0;  // 0: no truncation
  strategy how = strategy::longest_first;
  side direction = side::right;
};

// Padding as enable_padding(length=...): to a fixed length (0: none), then to a multiple of pad_to_multiple_of (0:
// none).
struct hf_padding {
  enum class side : std::uint8_t { right, left };
  std::size_t length = 0;
  std::int64_t pad_id = 0;
  std::int64_t pad_type_id = 0;
  std::size_t pad_to_multiple_of = 0;
  side direction = side::right;
};

}  // namespace jitembed::models
