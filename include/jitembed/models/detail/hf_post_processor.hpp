// The post-processors of tokenizer.json ("post_processor": TemplateProcessing, RobertaProcessing, BertProcessing,
// ByteLevel, Sequence) and the truncation that leaves room for the special tokens they add.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_json.hpp"

namespace jitembed::models::detail {

// One encoded sequence: ids and their type ids.
struct hf_seq {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> type_ids;
};

struct hf_post_processor {
  enum class kind : std::uint8_t { template_processing, roberta, bert, byte_level, sequence };
  struct piece {
    bool sequence = true;           // $A / $B, else a special token
    int which = 0;                  // 0: A, 1: B (sequence)
    std::vector<std::int64_t> ids;  // special token
    std::int64_t type_id = 0;
  };
  kind k = kind::byte_level;
  std::vector<piece> single, pair;
  std::int64_t cls = 0, sep = 0;  // roberta, bert
  std::vector<hf_post_processor> children;

  static result<hf_post_processor> parse(const hf_json& j, const json_at& at) {
    JITEMBED_ASSIGN_OR_RETURN(const std::string type, type_of(j, at));
    hf_post_processor p;
    if (type == "ByteLevel") {
      p.k = kind::byte_level;
    } else if (type == "Sequence") {
      p.k = kind::sequence;
      JITEMBED_ASSIGN_OR_RETURN(const hf_json* list, required(j, "processors", at));
      JITEMBED_TRY(array_of(*list, at["processors"]));
      for (std::size_t i = 0; i < list->size(); ++i) {
        JITEMBED_ASSIGN_OR_RETURN(auto c, parse((*list)[i], at["processors"][i]));
        p.children.push_back(std::move(c));
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      p.k = type == "BertProcessing" ? kind::bert : kind::roberta;
      JITEMBED_ASSIGN_OR_RETURN(p.cls, token_pair(j, "cls", at));
      JITEMBED_ASSIGN_OR_RETURN(p.sep, token_pair(j, "sep", at));
    } else if (type == "TemplateProcessing") {
      p.k = kind::template_processing;
      JITEMBED_ASSIGN_OR_RETURN(const hf_json* specials, required(j, "special_tokens", at));
      JITEMBED_TRY(object_of(*specials, at["special_tokens"]));
      JITEMBED_ASSIGN_OR_RETURN(p.single, parse_template(j, "single", *specials, at));
      JITEMBED_ASSIGN_OR_RETURN(p.pair, parse_template(j, "pair", *specials, at));
    } else {
      return unsupported(at, "post_processor", type);
    }
    return p;
  }

  // How many special tokens process() adds (what truncation leaves room for).
  std::size_t added_tokens(bool is_pair) const {
    switch (k) {
      case kind::byte_level:
        return 0;
      case kind::roberta:
        return is_pair ? 4 : 2;
      case kind::bert:
        return is_pair ? 3 : 2;
      case kind::template_processing: {
        std::size_t n = 0;
        for (const auto& pc : is_pair ? pair : single)
          if (!pc.sequence) n += pc.ids.size();
        return n;
      }
      case kind::sequence: {
        std::size_t n = 0;
        for (const auto& c : children) n += c.added_tokens(is_pair);
        return n;
      }
    }
    return 0;
  }

  // The library's process_encodings: encodings (one or two) in, the list to concatenate out.
  void process(std::vector<hf_seq>& encs, bool add_special) const {
    switch (k) {
      case kind::byte_level:
        return;
      case kind::sequence:
        for (const auto& c : children) c.process(encs, add_special);
        return;
      case kind::roberta:
      case kind::bert: {
        if (k == kind::roberta)
          for (auto& e : encs) std::fill(e.type_ids.begin(), e.type_ids.end(), 0);
        if (!add_special) return;
        for (std::size_t i = 0; i < encs.size(); ++i) {
          auto& e = encs[i];
          if (i == 0) {
            e.ids.insert(e.ids.begin(), cls), e.ids.push_back(sep);
            e.type_ids.insert(e.type_ids.begin(), 0), e.type_ids.push_back(0);
          } else if (k == kind::roberta) {
            e.ids.insert(e.ids.begin(), sep), e.ids.push_back(sep);
            e.type_ids.assign(e.ids.size(), 0);
          } else {
            e.ids.push_back(sep), e.type_ids.push_back(1);
          }
        }
        return;
      }
      case kind::template_processing: {
        std::vector<hf_seq> out;
        for (const auto& pc : encs.size() == 2 ? pair : single) {
          if (pc.sequence) {
            if (static_cast<std::size_t>(pc.which) >= encs.size()) continue;
            hf_seq s = encs[static_cast<std::size_t>(pc.which)];
            s.type_ids.assign(s.ids.size(), pc.type_id);
            out.push_back(std::move(s));
          } else if (add_special) {
            out.push_back({pc.ids, std::vector<std::int64_t>(pc.ids.size(), pc.type_id)});
          }
        }
        encs.swap(out);
        return;
      }
    }
  }

 private:
  static result<std::int64_t> token_pair(const hf_json& j, std::string_view key, const json_at& at) {
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* v, required(j, key, at));
    if (!v->is_array() || v->size() != 2 || !(*v)[0].is_string()) return at[key].invalid("expected [\"token\", id]");
    JITEMBED_ASSIGN_OR_RETURN(const auto id, uint_of((*v)[1], at[key][1]));
    return static_cast<std::int64_t>(id);
  }

  static result<std::vector<piece>> parse_template(const hf_json& j, std::string_view key, const hf_json& specials,
                                                   const json_at& at) {
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* list, required(j, key, at));
    JITEMBED_TRY(array_of(*list, at[key]));
    std::vector<piece> out;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const json_at pa = at[key][i];
      const hf_json& e = (*list)[i];
      JITEMBED_TRY(object_of(e, pa));
      piece pc;
      const hf_json* body = member(e, "Sequence");
      json_at ba = pa["Sequence"];
      if (!body) {
        body = member(e, "SpecialToken");
        ba = pa["SpecialToken"];
        pc.sequence = false;
      }
      if (!body) return pa.invalid("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      JITEMBED_TRY(object_of(*body, ba));
      JITEMBED_ASSIGN_OR_RETURN(const std::string id, required_string(*body, "id", ba));
      if (const hf_json* t = member(*body, "type_id")) {
        JITEMBED_ASSIGN_OR_RETURN(const auto type_id, uint_of(*t, ba["type_id"]));
        pc.type_id = static_cast<std::int64_t>(type_id);
      }
      if (pc.sequence) {
        if (id != "A" && id != "B") return ba["id"].invalid("a template sequence is A or B, not '" + id + "'");
        pc.which = id == "A" ? 0 : 1;
      } else {
        const hf_json* st = member(specials, id);
        if (!st) return ba["id"].invalid("special token '" + id + "' is not in special_tokens");
        const json_at sa = at["special_tokens"][id];
        JITEMBED_TRY(object_of(*st, sa));
        JITEMBED_ASSIGN_OR_RETURN(const hf_json* ids, required(*st, "ids", sa));
        JITEMBED_TRY(array_of(*ids, sa["ids"]));
        for (std::size_t k = 0; k < ids->size(); ++k) {
          JITEMBED_ASSIGN_OR_RETURN(const auto v, uint_of((*ids)[k], sa["ids"][k]));
          pc.ids.push_back(static_cast<std::int64_t>(v));
        }
      }
      out.push_back(std::move(pc));
    }
    return out;
  }
};

}  // namespace jitembed::models::detail
