// A compiled PCRE2 pattern (UTF + UCP, JIT where available) iterated as the tokenizers library iterates its
// Oniguruma regexes: the (start, end) of every non-overlapping match, an empty match right after the previous one
// skipped.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"

namespace jitembed::models::detail {

class hf_regex {
 public:
  hf_regex() = default;

  // A regex (literal = false) or an exact string (literal = true, the library's regex::escape). decode_failed with
  // PCRE2's message and offset when the pattern does not compile; `where` names the JSON path.
  static result<hf_regex> compile(std::string_view pattern, bool literal, const std::string& where) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    const std::uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;  // LITERAL refuses UCP
    pcre2_code* re =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &code, &offset, nullptr);
    if (re == nullptr) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(code, buf, sizeof buf);
      return fail(errc::decode_failed,
                  where + ": the pattern does not compile (PCRE2: " + reinterpret_cast<const char*>(buf) +
                      " at offset " + std::to_string(offset) + ")");
    }
    hf_regex r;
    r.code_ = std::shared_ptr<pcre2_code>(re, &pcre2_code_free);
    r.jit_ = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return r;
  }

  explicit operator bool() const noexcept { return code_ != nullptr; }

  // Calls f(start, end) for each match in s (valid UTF-8), in order. Returns false when PCRE2 fails to match
  // (its match limit: a pathological pattern), which the caller reports.
  template <class F>
  bool for_each_match(std::string_view s, F&& f) const {
    pcre2_match_data* md = match_data();
    if (md == nullptr) return false;
    std::size_t pos = 0;
    bool have_last = false;
    std::size_t last_end = 0;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    while (pos <= s.size()) {
      const int rc = jit_ ? pcre2_jit_match(code_.get(), subject, s.size(), pos, 0, md, nullptr)
                          : pcre2_match(code_.get(), subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return true;
      if (rc < 0) return false;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const std::size_t b = ov[0], e = ov[1];
      if (b == e && have_last && last_end == e) {  // Oniguruma's rule: no empty match just after the previous one
        if (pos >= s.size()) return true;
        pos += cp_len(static_cast<unsigned char>(s[pos]));
        continue;
      }
      f(b, e);
      have_last = true;
      last_end = e;
      pos = e;
      if (b == e && pos >= s.size()) return true;
    }
    return true;
  }

 private:
  // One match data per thread, shared by all patterns: one ovector pair is all the iteration reads.
  static pcre2_match_data* match_data() {
    thread_local std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
    return md.get();
  }

  std::shared_ptr<pcre2_code> code_;
  bool jit_ = false;
};

}  // namespace jitembed::models::detail
