// Parses an untrusted JSON inference header: a SAX pass first bounds nesting depth and keys per object (lookups
// are linear: 100k keys would cost quadratic time), then the document is built with key order kept.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"

namespace jitembed::net::kserve::detail {

class json_guard : public nlohmann::json_sax<nlohmann::ordered_json> {
 public:
  json_guard(std::size_t max_depth, std::size_t max_keys) : max_depth_(max_depth), max_keys_(max_keys) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return push(true); }
  bool key(string_t&) override {
    if (++keys_.back() > max_keys_) {
      error = fail(errc::limit_exceeded, "inference header: object with more than max_object_keys " + std::to_string(max_keys_) + " keys");
      return false;
    }
    return true;
  }
  bool end_object() override { return pop(); }
  bool start_array(std::size_t) override { return push(false); }
  bool end_array() override { return pop(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = fail(errc::corrupt_data, std::string("inference header is not valid JSON: ") + ex.what());
    return false;
  }

  error_info error{};

 private:
  bool push(bool) {
    if (keys_.size() == max_depth_) {
      error = fail(errc::limit_exceeded, "inference header: JSON nesting deeper than max_json_depth " + std::to_string(max_depth_));
      return false;
    }
    keys_.push_back(0);
    return true;
  }
  bool pop() {
    keys_.pop_back();
    return true;
  }

  std::size_t max_depth_;
  std::size_t max_keys_;
  std::vector<std::size_t> keys_;
};

inline result<nlohmann::ordered_json> parse_json_header(std::string_view text, std::size_t max_depth, std::size_t max_keys) {
  json_guard guard(max_depth, max_keys);
  const bool ok = nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &guard);
  if (!ok) {
    if (guard.error.code == errc::ok) return fail(errc::corrupt_data, "inference header is not valid JSON");
    return guard.error;
  }
  auto j = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(errc::corrupt_data, "inference header is not valid JSON");
  return j;
}

}  // namespace jitembed::net::kserve::detail
