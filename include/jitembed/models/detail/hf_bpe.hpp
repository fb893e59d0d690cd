// The BPE model of tokenizer.json: vocab, merges (strings "a b" or pairs), unk_token, fuse_unk, byte_fallback,
// continuing_subword_prefix, end_of_word_suffix, ignore_merges; dropout must be null (or 0): sampling is not
// reproducible.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"
#include "jitembed/models/detail/hf_vocab.hpp"

namespace jitembed::models::detail {

class hf_bpe {
 public:
  static result<hf_bpe> parse(const hf_json& j, const json_at& at) {
    hf_bpe m;
    if (const hf_json* d = member(j, "dropout")) {
      JITEMBED_ASSIGN_OR_RETURN(const double p, number_of(*d, at["dropout"]));
      if (p != 0.0)
        return at["dropout"].error(errc::invalid_argument,
                                   "BPE dropout must be null or 0 (sampled tokenization is not reproducible)");
    }
    JITEMBED_ASSIGN_OR_RETURN(m.unk_, optional_string(j, "unk_token", at));
    JITEMBED_ASSIGN_OR_RETURN(const auto prefix, optional_string(j, "continuing_subword_prefix", at));
    JITEMBED_ASSIGN_OR_RETURN(const auto suffix, optional_string(j, "end_of_word_suffix", at));
    m.prefix_ = prefix.value_or(""), m.has_prefix_ = prefix.has_value();
    m.suffix_ = suffix.value_or(""), m.has_suffix_ = suffix.has_value();
    JITEMBED_ASSIGN_OR_RETURN(m.fuse_unk_, optional_bool(j, "fuse_unk", at, false));
    JITEMBED_ASSIGN_OR_RETURN(m.byte_fallback_, optional_bool(j, "byte_fallback", at, false));
    JITEMBED_ASSIGN_OR_RETURN(m.ignore_merges_, optional_bool(j, "ignore_merges", at, false));
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* vocab, required(j, "vocab", at));
    JITEMBED_TRY(parse_vocab(*vocab, at["vocab"], m.vocab_));
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* merges, required(j, "merges", at));
    JITEMBED_TRY(array_of(*merges, at["merges"]));
    m.merges_.reserve(merges->size());
    std::string joined;
    for (std::size_t i = 0; i < merges->size(); ++i) {
      const hf_json& e = (*merges)[i];
      const json_at ea = at["merges"][i];
      std::string a, b;
      if (e.is_string()) {  // legacy "a b": exactly one space
        const std::string s = e.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          return ea.invalid("a merge is two tokens separated by one space");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>(), b = e[1].get<std::string>();
      } else {
        return ea.invalid("a merge is \"a b\" or [\"a\", \"b\"]");
      }
      const auto ia = find_id(m.vocab_, a), ib = find_id(m.vocab_, b);
      if (!ia || !ib) return ea.invalid("merge token '" + (ia ? b : a) + "' is not in the vocabulary");
      const std::size_t cut = b.size() >= m.prefix_.size() ? m.prefix_.size() : 0;
      joined = a + b.substr(cut);
      const auto in = find_id(m.vocab_, joined);
      if (!in) return ea.invalid("merged token '" + joined + "' is not in the vocabulary");
      m.merges_.put(key(*ia, *ib), {static_cast<std::uint32_t>(i), *in});
    }
    m.cache_ = std::make_shared<word_cache>();
    return m;
  }

  static result<void> parse_vocab(const hf_json& v, const json_at& at, vocab_map& out) {
    JITEMBED_TRY(object_of(v, at));
    out.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it) {
      JITEMBED_ASSIGN_OR_RETURN(const auto id, uint_of(it.value(), at[it.key()], 0x7FFFFFFF));
      out[it.key()] = static_cast<std::int32_t>(id);
    }
    return {};
  }

  const vocab_map& vocab() const noexcept { return vocab_; }

  // Appends the ids of one word. invalid_argument when the unk_token is needed and is not in the vocabulary.
  result<void> tokenize(std::string_view word, std::vector<std::int64_t>& out) const {
    if (word.empty()) return {};
    if (ignore_merges_) {
      if (const auto id = find_id(vocab_, word)) return out.push_back(*id), result<void>();
    }
    if (cache_->get(word, out)) return {};
    const std::size_t first = out.size();
    JITEMBED_TRY(merge_word(word, out));
    cache_->put(word, out.data() + first, out.size() - first);
    return {};
  }

 private:
  struct merge {
    std::uint32_t rank;
    std::int32_t id;
  };
  struct symbol {
    std::int32_t id;
    std::int32_t prev, next;
    bool alive;
  };
  struct candidate {
    std::uint32_t rank;
    std::int32_t pos;
    std::int32_t id;
    bool operator<(const candidate& o) const noexcept { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  static std::uint64_t key(std::int32_t a, std::int32_t b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  result<void> merge_word(std::string_view w, std::vector<std::int64_t>& out) const {
    std::vector<symbol> syms;
    syms.reserve(w.size());
    std::optional<std::int32_t> unk_id;
    std::string s;
    auto add = [&syms](std::int32_t id) { syms.push_back({id, static_cast<std::int32_t>(syms.size()) - 1, -1, true}); };
    auto flush_unk = [&] {
      if (unk_id) add(*unk_id), unk_id.reset();
    };
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t n = cp_len(static_cast<unsigned char>(w[i]));
      s.clear();
      if (i > 0 && has_prefix_) s += prefix_;
      s.append(w.substr(i, n));
      if (i + n >= w.size() && has_suffix_) s += suffix_;
      i += n;
      if (const auto id = find_id(vocab_, s)) {
        flush_unk();
        add(*id);
        continue;
      }
      if (byte_fallback_) {
        std::vector<std::int32_t> bytes;
        char name[8];
        for (const char c : s) {
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<unsigned char>(c)));
          const auto id = find_id(vocab_, name);
          if (!id) break;
          bytes.push_back(*id);
        }
        if (bytes.size() == s.size()) {
          // the library adds the byte tokens without flushing a pending unk first
          for (const auto id : bytes) add(id);
          continue;
        }
      }
      if (unk_) {
        const auto id = find_id(vocab_, *unk_);
        if (!id)
          return fail(errc::invalid_argument, "hf_tokenizer: BPE unk_token '" + *unk_ + "' is not in the vocabulary");
        if (unk_id && !fuse_unk_) flush_unk();
        if (!unk_id) unk_id = *id;
      }
    }
    flush_unk();
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) syms[i].next = static_cast<std::int32_t>(i + 1);
    std::priority_queue<candidate> queue;
    for (std::size_t i = 0; i + 1 < syms.size(); ++i)
      if (const merge* m = merges_.get(key(syms[i].id, syms[i + 1].id)))
        queue.push({m->rank, static_cast<std::int32_t>(i), m->id});
    while (!queue.empty()) {
      const candidate top = queue.top();
      queue.pop();
      symbol& cur = syms[static_cast<std::size_t>(top.pos)];
      if (!cur.alive || cur.next < 0) continue;
      symbol& right = syms[static_cast<std::size_t>(cur.next)];
      const merge* m = merges_.get(key(cur.id, right.id));
      if (!m || m->id != top.id) continue;  // an expired entry
      cur.id = top.id;
      right.alive = false;
      cur.next = right.next;
      if (right.next >= 0) syms[static_cast<std::size_t>(right.next)].prev = top.pos;
      if (cur.prev >= 0)
        if (const merge* p = merges_.get(key(syms[static_cast<std::size_t>(cur.prev)].id, cur.id)))
          queue.push({p->rank, cur.prev, p->id});
      if (cur.next >= 0)
        if (const merge* n = merges_.get(key(cur.id, syms[static_cast<std::size_t>(cur.next)].id)))
          queue.push({n->rank, top.pos, n->id});
    }
    for (const auto& sy : syms)
      if (sy.alive) out.push_back(sy.id);
    return {};
  }

  vocab_map vocab_;
  u64_map<merge> merges_;
  std::optional<std::string> unk_;
  std::string prefix_, suffix_;
  bool has_prefix_ = false, has_suffix_ = false;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::shared_ptr<word_cache> cache_;
};

}  // namespace jitembed::models::detail
