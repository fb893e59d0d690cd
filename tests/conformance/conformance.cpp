// jitembed-conformance: writes the conformance vectors of docs/format.md from byte-level layouts written
// here from the spec (not through record_builder), checks that the committed copies still match, and runs
// the C++ reader over the manifest:
//   jitembed-conformance generate DIR          write DIR/manifest.json and the vector files
//   jitembed-conformance check-generated DIR   the files in DIR are exactly what generate writes
//   jitembed-conformance run DIR SPEC          the reader agrees with every verdict and every content;
//                                              every rule of SPEC's rule table has a vector with its errc
#include <nlohmann/json.hpp>

// GCC 12 warns (falsely) that std::vector<std::int64_t>{4} writes past its one-element allocation.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <xxhash.h>

#include "jitembed/format.hpp"

namespace {

using namespace jitembed;
using json = nlohmann::ordered_json;
using bytes = std::vector<std::uint8_t>;
namespace fs = std::filesystem;

// ---- little-endian helpers ----------------------------------------------------------------------

template <class T>
void put(bytes& b, std::size_t off, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) b.at(off + i) = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i));
}
template <class T>
T get(const bytes& b, std::size_t off) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= std::uint64_t{b.at(off + i)} << (8 * i);
  return static_cast<T>(v);
}
std::size_t align(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
bytes str(std::string_view s) { return bytes(s.begin(), s.end()); }
bytes_view view(const bytes& b) { return bytes_view(reinterpret_cast<const std::byte*>(b.data()), b.size()); }
std::uint64_t h64(const bytes& b, std::size_t off, std::size_t n) {
  return xxh3_64(bytes_view(reinterpret_cast<const std::byte*>(b.data()) + off, n));
}
std::string hex(const std::uint8_t* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

// ---- the spec's transforms, written independently of the codec library --------------------------

// Byte shuffle with element size s: m = n / s elements; byte b of element i goes to b * m + i; the tail of
// n % s bytes follows unchanged.
bytes shuffle(const bytes& d, std::size_t s) {
  if (s == 0) return d;
  const std::size_t m = d.size() / s;
  bytes out(d.size());
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t b = 0; b < s; ++b) out[b * m + i] = d[i * s + b];
  for (std::size_t k = m * s; k < d.size(); ++k) out[k] = d[k];
  return out;
}

// One zstd frame holding `d` in a single raw (stored) block: deterministic whatever the zstd version.
bytes zstd_frame(const bytes& d) {
  if (d.size() > 255) throw std::runtime_error("zstd_frame: up to 255 bytes");
  bytes f = {0x28, 0xb5, 0x2f, 0xfd, 0x20, static_cast<std::uint8_t>(d.size())};  // single segment, 1-byte size
  const std::uint32_t bh = static_cast<std::uint32_t>(d.size()) << 3 | 1;          // last block, raw
  f.push_back(static_cast<std::uint8_t>(bh));
  f.push_back(static_cast<std::uint8_t>(bh >> 8));
  f.push_back(static_cast<std::uint8_t>(bh >> 16));
  f.insert(f.end(), d.begin(), d.end());
  return f;
}

// A frame whose header asks for a 2^28-byte window (more than the default max_zstd_window_log 27).
bytes zstd_frame_big_window(const bytes& d) {
  bytes f = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x90};  // no single segment, window descriptor: 2^(10+18)
  const std::uint32_t bh = static_cast<std::uint32_t>(d.size()) << 3 | 1;
  f.push_back(static_cast<std::uint8_t>(bh));
  f.push_back(static_cast<std::uint8_t>(bh >> 8));
  f.push_back(static_cast<std::uint8_t>(bh >> 16));
  f.insert(f.end(), d.begin(), d.end());
  return f;
}

// The frame of zstd_frame(d) with the content checksum flag set and a checksum appended: the low 32 bits
// of XXH64(d, seed 0), little-endian (RFC 8878 3.1.1); `flip` xors its first byte (a mismatch).
bytes zstd_frame_checksummed(const bytes& d, std::uint8_t flip = 0) {
  bytes f = zstd_frame(d);
  f[4] |= 0x04;  // Content_Checksum_Flag
  const auto sum = static_cast<std::uint32_t>(XXH64(d.data(), d.size(), 0));
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::uint8_t>(sum >> (8 * i)));
  f[f.size() - 4] ^= flip;
  return f;
}

// As zstd_frame_big_window, but the header also declares the content size (4-byte Frame_Content_Size), so
// a decoder may decode it in one pass without allocating a window: the window still counts.
bytes zstd_frame_big_window_sized(const bytes& d) {
  bytes f = {0x28, 0xb5, 0x2f, 0xfd, 0x80, 0x90, 0, 0, 0, 0};  // FCS flag 2 (4 bytes), window 2^(10+18)
  put<std::uint32_t>(f, 6, static_cast<std::uint32_t>(d.size()));
  const std::uint32_t bh = static_cast<std::uint32_t>(d.size()) << 3 | 1;
  f.push_back(static_cast<std::uint8_t>(bh));
  f.push_back(static_cast<std::uint8_t>(bh >> 8));
  f.push_back(static_cast<std::uint8_t>(bh >> 16));
  f.insert(f.end(), d.begin(), d.end());
  return f;
}

bytes skippable_frame(const bytes& d) {
  bytes f = {0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0};
  put<std::uint32_t>(f, 4, static_cast<std::uint32_t>(d.size()));
  f.insert(f.end(), d.begin(), d.end());
  return f;
}

bytes cat(bytes a, const bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- records, batches, shards laid out from the spec -------------------------------------------

enum kind_v : std::uint8_t { k_bytes = 0, k_image = 1, k_video = 2, k_text = 3, k_tensor = 4, k_json = 5 };
enum codec_v : std::uint8_t { c_raw = 0, c_zstd = 1, c_jpeg = 2, c_video = 3, c_text = 4 };
enum dtype_v : std::uint8_t { u8 = 0, i8, i16, i32, i64, f16, bf16, f32, f64, boolean };

struct field {
  std::string name;
  std::uint8_t kind = k_bytes, codec = c_raw, dtype = u8;
  std::vector<std::int64_t> dims;
  bytes payload;
  std::uint64_t decoded_size = 0;
  std::uint8_t shuffle = 0, flags = 0;
  std::optional<bytes> decoded;  // what a reader's decode gives (content of accept vectors)
};

struct record_spec {
  std::uint16_t minor = 0, header_size = 64, entry_size = 48;
  std::uint32_t flags = 0;
  std::uint8_t header_fill = 0, entry_fill = 0;  // bytes a newer minor appends (or fills in reserved space)
  std::vector<field> fields;
};

bytes encode_record(const record_spec& r) {
  const std::size_t n = r.fields.size();
  const std::size_t table_end = r.header_size + n * r.entry_size;
  std::vector<std::size_t> extra(n), pay(n);
  std::size_t pos = table_end;
  for (std::size_t i = 0; i < n; ++i) {
    extra[i] = pos;
    pos = align(pos + 8 * r.fields[i].dims.size() + r.fields[i].name.size(), 8);
  }
  const std::size_t meta = pos;
  pos = align(meta, 64);
  for (std::size_t i = 0; i < n; ++i) {
    pay[i] = pos;
    pos = align(pos + r.fields[i].payload.size(), 64);
  }
  bytes b(pos == 0 ? 64 : pos);
  std::memcpy(b.data(), "JEMR", 4);
  put<std::uint16_t>(b, 4, 1);
  put<std::uint16_t>(b, 6, r.minor);
  put<std::uint16_t>(b, 8, r.header_size);
  put<std::uint16_t>(b, 10, r.entry_size);
  put<std::uint32_t>(b, 12, static_cast<std::uint32_t>(n));
  put<std::uint32_t>(b, 16, r.flags);
  put<std::uint32_t>(b, 20, static_cast<std::uint32_t>(meta));
  put<std::uint64_t>(b, 24, b.size());
  if (r.header_fill) {
    for (std::size_t k = 32; k < 48; ++k) b[k] = r.header_fill;
    for (std::size_t k = 64; k < r.header_size; ++k) b[k] = r.header_fill;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const field& f = r.fields[i];
    const std::size_t e = r.header_size + i * r.entry_size;
    put<std::uint64_t>(b, e, pay[i]);
    put<std::uint64_t>(b, e + 8, f.payload.size());
    put<std::uint64_t>(b, e + 16, f.decoded_size);
    put<std::uint64_t>(b, e + 24, xxh3_64(view(f.payload)));
    put<std::uint32_t>(b, e + 32, static_cast<std::uint32_t>(extra[i]));
    put<std::uint16_t>(b, e + 36, static_cast<std::uint16_t>(f.name.size()));
    b[e + 38] = f.kind;
    b[e + 39] = f.codec;
    b[e + 40] = f.dtype;
    b[e + 41] = static_cast<std::uint8_t>(f.dims.size());
    b[e + 42] = f.shuffle;
    b[e + 43] = f.flags;
    if (r.entry_fill) {
      for (std::size_t k = 44; k < 48; ++k) b[e + k] = r.entry_fill;
      for (std::size_t k = 48; k < r.entry_size; ++k) b[e + k] = r.entry_fill;
    }
    for (std::size_t d = 0; d < f.dims.size(); ++d) put<std::int64_t>(b, extra[i] + 8 * d, f.dims[d]);
    std::memcpy(b.data() + extra[i] + 8 * f.dims.size(), f.name.data(), f.name.size());
    if (!f.payload.empty()) std::memcpy(b.data() + pay[i], f.payload.data(), f.payload.size());
  }
  return b;
}

// Header checksum as the spec states it: XXH3-128 of [64, meta_size) seeded with XXH3-64 of [0, 48).
void seal(bytes& b, std::size_t meta_end) {
  const std::uint64_t seed = h64(b, 0, 48);
  const hash128 h = xxh3_128(bytes_view(reinterpret_cast<const std::byte*>(b.data()) + 64, meta_end - 64), seed);
  put<std::uint64_t>(b, 48, h.low);
  put<std::uint64_t>(b, 56, h.high);
}
void seal_record(bytes& b) { seal(b, get<std::uint32_t>(b, 20)); }
bytes sealed(bytes b) {
  seal_record(b);
  return b;
}
bytes record(const record_spec& r) { return sealed(encode_record(r)); }

struct batch_options {
  std::size_t extra_tail = 0;  // zero bytes after the last record, inside batch_size
  std::uint16_t minor = 0, header_size = 64, entry_size = 16;
  std::uint32_t flags = 0;
  std::uint8_t fill = 0;  // reserved bytes and the bytes a newer minor appends to the header and entries
};

bytes encode_batch(const std::vector<bytes>& recs, batch_options o = {}) {
  const std::size_t meta = o.header_size + o.entry_size * recs.size();
  std::size_t pos = align(meta, 64);
  bytes b(pos);
  std::memcpy(b.data(), "JEMB", 4);
  put<std::uint16_t>(b, 4, 1);
  put<std::uint16_t>(b, 6, o.minor);
  put<std::uint16_t>(b, 8, o.header_size);
  put<std::uint16_t>(b, 10, o.entry_size);
  put<std::uint32_t>(b, 12, static_cast<std::uint32_t>(recs.size()));
  put<std::uint32_t>(b, 24, o.flags);
  if (o.fill) {
    for (std::size_t k = 28; k < 48; ++k) b[k] = o.fill;
    for (std::size_t k = 64; k < o.header_size; ++k) b[k] = o.fill;
  }
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const std::size_t e = o.header_size + o.entry_size * i;
    put<std::uint64_t>(b, e, pos);
    put<std::uint64_t>(b, e + 8, recs[i].size());
    for (std::size_t k = 16; k < o.entry_size; ++k) b[e + k] = o.fill;
    b.insert(b.end(), recs[i].begin(), recs[i].end());
    pos += recs[i].size();
  }
  b.resize(b.size() + o.extra_tail);
  put<std::uint64_t>(b, 16, b.size());
  seal(b, meta);
  return b;
}
void seal_batch(bytes& b) { seal(b, get<std::uint16_t>(b, 8) + get<std::uint16_t>(b, 10) * std::size_t{get<std::uint32_t>(b, 12)}); }

struct shard_options {
  std::size_t gap_before_index = 0;  // zero bytes between the last record and the index
  std::size_t unused_key_bytes = 0;  // key-area bytes no entry points at
};

bytes encode_shard(const std::vector<std::pair<std::string, bytes>>& recs, shard_options o = {}) {
  bytes b(64);
  std::memcpy(b.data(), "JEMS", 4);
  put<std::uint16_t>(b, 4, 1);
  std::vector<std::size_t> off;
  for (const auto& [key, r] : recs) {
    off.push_back(b.size());
    b.insert(b.end(), r.begin(), r.end());
  }
  b.resize(b.size() + o.gap_before_index);
  const std::size_t index_offset = b.size();
  bytes idx(24 * recs.size());
  std::string keys;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    put<std::uint64_t>(idx, 24 * i, off[i]);
    put<std::uint64_t>(idx, 24 * i + 8, recs[i].second.size());
    put<std::uint32_t>(idx, 24 * i + 16, static_cast<std::uint32_t>(keys.size()));
    put<std::uint32_t>(idx, 24 * i + 20, static_cast<std::uint32_t>(recs[i].first.size()));
    keys += recs[i].first;
  }
  keys.append(o.unused_key_bytes, 'x');
  idx.insert(idx.end(), keys.begin(), keys.end());
  b.insert(b.end(), idx.begin(), idx.end());
  b.resize(align(b.size(), 64));
  const std::size_t t = b.size();
  b.resize(t + 64);
  std::memcpy(b.data() + t, "JEMSHIDX", 8);
  put<std::uint16_t>(b, t + 8, 1);
  put<std::uint64_t>(b, t + 16, index_offset);
  put<std::uint64_t>(b, t + 24, idx.size());
  put<std::uint64_t>(b, t + 32, recs.size());
  put<std::uint64_t>(b, t + 40, h64(b, index_offset, idx.size()));
  put<std::uint64_t>(b, t + 56, h64(b, t, 56));
  return b;
}
// Recomputes the index checksum and then the trailer checksum.
void seal_shard(bytes& b, bool index_too = true) {
  const std::size_t t = b.size() - 64;
  if (index_too) put<std::uint64_t>(b, t + 40, h64(b, get<std::uint64_t>(b, t + 16), get<std::uint64_t>(b, t + 24)));
  put<std::uint64_t>(b, t + 56, h64(b, t, 56));
}

// ---- content: what a reader must see in an accepted vector --------------------------------------

json field_content(std::string_view name, int kind, int codec, int dtype, const std::vector<std::int64_t>& dims,
                   const std::optional<std::string>& decoded_hex) {
  json f = {{"name", std::string(name)}, {"kind", kind}, {"codec", codec}, {"dtype", dtype}, {"shape", dims}};
  if (decoded_hex) f["decoded"] = *decoded_hex;
  return f;
}
json record_content(const record_spec& r) {
  json fs = json::array();
  for (const auto& f : r.fields) {
    std::optional<std::string> d;
    if (f.decoded) d = hex(f.decoded->data(), f.decoded->size());
    fs.push_back(field_content(f.name, f.kind, f.codec, f.dtype, f.dims, d));
  }
  return fs;
}

// ---- field constructors ------------------------------------------------------------------------

template <class T>
bytes le_array(std::initializer_list<T> v) {
  bytes b;
  for (T x : v) {
    std::uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));  // the generator runs on little-endian machines (checked in main)
    b.insert(b.end(), tmp, tmp + sizeof(T));
  }
  return b;
}

field raw_field(std::string name, std::uint8_t kind, bytes data, std::uint8_t dtype = u8, std::vector<std::int64_t> dims = {}) {
  field f{std::move(name), kind, c_raw, dtype, std::move(dims), data, data.size()};
  f.decoded = std::move(data);
  return f;
}
field zstd_field(std::string name, std::uint8_t kind, bytes data, std::uint8_t shuffle_size = 0, std::uint8_t dtype = u8,
                 std::vector<std::int64_t> dims = {}) {
  field f{std::move(name), kind, c_zstd, dtype, std::move(dims), zstd_frame(shuffle(data, shuffle_size)), data.size()};
  f.shuffle = shuffle_size;
  f.decoded = std::move(data);
  return f;
}
field text_codec_field(std::string name, std::string s) {
  field f{std::move(name), k_text, c_text, u8, {}, zstd_frame(str(s)), s.size()};
  f.decoded = str(s);
  return f;
}

// The reference record every field rule patches: one field of each kind and codec.
record_spec basic_spec() {
  record_spec r;
  r.fields.push_back(raw_field("caption", k_text, str("ein K\xc3\xa4tzchen \xf0\x9f\x90\xb1 auf der Matte")));
  r.fields.push_back(raw_field("latent", k_tensor, le_array<float>({0.5f, -1.0f, 2.25f, 0.0f, 3.5f, -0.125f}), f32, {2, 3}));
  r.fields.push_back(zstd_field("ids", k_tensor, le_array<std::int64_t>({1, 300, 70000, -5}), 8, i64, {4}));
  r.fields.push_back(zstd_field("meta", k_json, str("{\"w\":2,\"h\":3}")));
  r.fields.push_back(raw_field("blob", k_bytes, {1, 2, 3, 4, 5}));
  r.fields.push_back(text_codec_field("summary", "a short summary"));
  r.fields.push_back(raw_field("img", k_image, {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120}, u8, {2, 2, 3}));
  field clip{"clip", k_video, c_video, u8, {}, str("an encoded clip goes here"), 0};
  r.fields.push_back(clip);  // not decoded by the procedure: no decoded content
  return r;
}
enum basic_index : std::size_t { caption = 0, latent, ids, meta, blob, summary, img, clip };
std::size_t entry(std::size_t i) { return 64 + 48 * i; }

// ---- the vectors -------------------------------------------------------------------------------

struct vector_file {
  std::string file, type, expect, rule, what;
  bytes data;
  json limits = json::object();
  json content;  // accept vectors only
};

struct generator {
  std::vector<vector_file> out;

  void accept(std::string file, std::string type, std::string what, bytes data, json content, json limits = json::object()) {
    out.push_back({std::move(file), std::move(type), "accept", "valid", std::move(what), std::move(data), std::move(limits), std::move(content)});
  }
  void reject(std::string file, std::string type, std::string rule, std::string expect, std::string what, bytes data,
              json limits = json::object()) {
    out.push_back({std::move(file), std::move(type), std::move(expect), std::move(rule), std::move(what), std::move(data), std::move(limits), nullptr});
  }
};

void records(generator& g) {
  const record_spec bs = basic_spec();
  const bytes basic = record(bs);
  g.accept("record/basic.jemr", "record", "one field of each kind and codec", basic, {{"fields", record_content(bs)}});
  g.accept("record/empty.jemr", "record", "no fields: the 64-byte header alone", record(record_spec{}), {{"fields", json::array()}});

  record_spec sh;
  sh.fields.push_back(zstd_field("f32_s4", k_tensor, le_array<float>({1.0f, 2.0f, -3.0f}), 4, f32, {3}));
  sh.fields.push_back(zstd_field("i16_s8", k_tensor, le_array<std::int16_t>({1, -2, 3, 400, 5}), 8, i16, {5}));  // 1 element + 2-byte tail
  sh.fields.push_back(zstd_field("bytes_s2", k_bytes, {1, 2, 3, 4, 5, 6, 7}, 2));                            // tail of 1 byte
  sh.fields.push_back(zstd_field("u8_s4_short", k_tensor, {9, 8, 7}, 4, u8, {3}));  // fewer bytes than one element
  sh.fields.push_back(zstd_field("empty", k_tensor, {}, 0, f32, {0, 4}));
  sh.fields.push_back(raw_field("scalar", k_tensor, le_array<double>({2.5}), f64, {}));
  g.accept("record/shuffle.jemr", "record", "byte shuffle of element sizes 2/4/8 (matching the dtype or not, with tails)",
           record(sh), {{"fields", record_content(sh)}});

  record_spec fr;
  field multi{"multi", k_bytes, c_zstd, u8, {}, cat(cat(zstd_frame(str("two ")), skippable_frame(str("skip me"))), zstd_frame(str("frames"))), 10};
  multi.decoded = str("two frames");
  fr.fields.push_back(multi);
  g.accept("record/frames.jemr", "record", "a zstd payload of two frames with a skippable frame between", record(fr),
           {{"fields", record_content(fr)}});

  record_spec ck;
  field sum{"sum", k_bytes, c_zstd, u8, {}, zstd_frame_checksummed(str("checked")), 7};
  sum.decoded = str("checked");
  ck.fields.push_back(sum);
  g.accept("record/frame_checksum.jemr", "record", "a zstd frame with a matching content checksum (XXH64, low 32 bits)",
           record(ck), {{"fields", record_content(ck)}});

  record_spec zx;
  zx.fields.push_back(raw_field("none", k_tensor, {}, u8, {0, std::int64_t{1} << 31, std::int64_t{1} << 31}));
  g.accept("record/zero_extent.jemr", "record",
           "u8[0, 2^31, 2^31]: no elements; the non-zero extents multiply to 2^62 <= 2^63 - 1", record(zx),
           {{"fields", record_content(zx)}});

  record_spec nm;
  nm.minor = 1;
  nm.header_size = 128;
  nm.entry_size = 64;
  nm.flags = 0x5;  // optional flags 1.0 does not know: ignored
  nm.header_fill = 0xab;
  nm.entry_fill = 0xcd;
  field known = raw_field("t", k_tensor, le_array<float>({1.0f, 2.0f}), f32, {2});
  known.flags = 0x3;
  nm.fields.push_back(known);
  field future{"future", 9, 7, 0, {}, str("opaque payload of a future codec"), 123};
  nm.fields.push_back(future);  // unknown kind and codec: kept, not decoded
  field later = raw_field("later", 12, str("raw bytes of a future kind"));
  nm.fields.push_back(later);   // unknown kind, raw codec: decodes as bytes
  const bytes newer = record(nm);
  g.accept("record/newer_minor.jemr", "record",
           "1.1: 128-byte header, 64-byte entries, optional flags, reserved bytes and entry flags used, unknown kinds and codec",
           newer, {{"fields", record_content(nm)}});

  // Header rules.
  auto patched = [&](auto&& fn, bool reseal = true) {
    bytes b = basic;
    fn(b);
    if (reseal) seal_record(b);
    return b;
  };
  g.reject("record/rec.size.header.jemr", "record", "rec.size.header", "truncated", "63 bytes",
           bytes(basic.begin(), basic.begin() + 63));
  g.reject("record/rec.magic.jemr", "record", "rec.magic", "bad_magic", "magic JEMX",
           patched([](bytes& b) { b[3] = 'X'; }));
  g.reject("record/rec.major.jemr", "record", "rec.major", "unsupported_version", "major 2",
           patched([](bytes& b) { put<std::uint16_t>(b, 4, 2); }));
  g.reject("record/rec.header_size.jemr", "record", "rec.header_size", "corrupt_data", "header_size 72 in a 1.0 record",
           patched([](bytes& b) { put<std::uint16_t>(b, 8, 72); }));
  {
    bytes b = newer;
    put<std::uint16_t>(b, 8, 132);
    seal_record(b);
    g.reject("record/rec.header_size.newer.jemr", "record", "rec.header_size", "corrupt_data",
             "header_size 132 (not a multiple of 8) in a 1.1 record", b);
    b = newer;
    put<std::uint16_t>(b, 6, 0);
    seal_record(b);
    g.reject("record/rec.header_size.own_minor.jemr", "record", "rec.header_size", "corrupt_data",
             "the 1.1 record relabelled 1.0: header_size 128", b);
  }
  g.reject("record/rec.entry_size.jemr", "record", "rec.entry_size", "corrupt_data", "entry_size 56 in a 1.0 record",
           patched([](bytes& b) { put<std::uint16_t>(b, 10, 56); }));
  g.reject("record/rec.flags.required.jemr", "record", "rec.flags.required", "unsupported_version", "flag bit 16",
           patched([](bytes& b) { put<std::uint32_t>(b, 16, 0x10000); }));
  g.reject("record/rec.flags.optional.jemr", "record", "rec.flags.optional", "corrupt_data", "flag bit 0 in a 1.0 record",
           patched([](bytes& b) { put<std::uint32_t>(b, 16, 1); }));
  g.reject("record/rec.record_size.limit.jemr", "record", "rec.record_size.limit", "limit_exceeded",
           "record_size 2^31 + 64 > max_record_bytes", patched([](bytes& b) { put<std::uint64_t>(b, 24, (1ull << 31) + 64); }));
  g.reject("record/rec.record_size.short.jemr", "record", "rec.record_size.short", "truncated", "the last 64 bytes cut off",
           bytes(basic.begin(), basic.end() - 64));
  g.reject("record/rec.record_size.trailing.jemr", "record", "rec.record_size.trailing", "corrupt_data",
           "64 bytes after the record", cat(basic, bytes(64)));
  {
    bytes b = cat(basic, bytes(1));
    put<std::uint64_t>(b, 24, b.size());
    seal_record(b);
    g.reject("record/rec.record_size.align.jemr", "record", "rec.record_size.align", "corrupt_data",
             "record_size not a multiple of 64 (== the bytes given)", b);
  }
  g.reject("record/rec.field_count.limit.jemr", "record", "rec.field_count.limit", "limit_exceeded", "field_count 1025",
           patched([](bytes& b) { put<std::uint32_t>(b, 12, 1025); }));
  g.reject("record/rec.table.bounds.jemr", "record", "rec.table.bounds", "corrupt_data", "1000 entries do not fit the record",
           patched([](bytes& b) { put<std::uint32_t>(b, 12, 1000); }));
  g.reject("record/rec.meta_size.range.jemr", "record", "rec.meta_size.range", "corrupt_data", "meta_size inside the field table",
           patched([](bytes& b) { put<std::uint32_t>(b, 20, 64 + 48 * 8 - 8); }, false));
  {
    bytes b = patched([](bytes& b) { put<std::uint32_t>(b, 20, get<std::uint32_t>(b, 20) + 4); }, false);
    seal(b, get<std::uint32_t>(basic, 20));
    g.reject("record/rec.meta_size.align.jemr", "record", "rec.meta_size.range", "corrupt_data", "meta_size not a multiple of 8", b);
  }
  g.reject("record/rec.checksum.jemr", "record", "rec.checksum", "checksum_mismatch", "a table byte flipped, checksum not updated",
           patched([](bytes& b) { b[entry(latent) + 16] ^= 0x01; }, false));
  g.reject("record/rec.checksum.header.jemr", "record", "rec.checksum", "checksum_mismatch",
           "a reserved header byte flipped, checksum not updated", patched([](bytes& b) { b[40] ^= 0x80; }, false));
  g.reject("record/rec.reserved.jemr", "record", "rec.reserved", "corrupt_data", "reserved header byte 40 set in a 1.0 record",
           patched([](bytes& b) { b[40] = 1; }));

  // Field-table rules (the checksum updated so that the rule itself is reached).
  const std::size_t meta_size = get<std::uint32_t>(basic, 20);
  auto ef = [&](std::size_t i, std::size_t off) { return entry(i) + off; };
  g.reject("record/field.rank.limit.jemr", "record", "field.rank.limit", "limit_exceeded", "rank 9",
           patched([&](bytes& b) { b[ef(latent, 41)] = 9; }));
  g.reject("record/field.name.empty.jemr", "record", "field.name.empty", "corrupt_data", "name_size 0",
           patched([&](bytes& b) { put<std::uint16_t>(b, ef(caption, 36), 0); }));
  g.reject("record/field.name.limit.jemr", "record", "field.name.limit", "limit_exceeded", "name_size 257 > max_name_bytes",
           patched([&](bytes& b) { put<std::uint16_t>(b, ef(caption, 36), 257); }));
  g.reject("record/field.extra_offset.jemr", "record", "field.extra_offset", "corrupt_data", "extra_offset 8 bytes late",
           patched([&](bytes& b) { put<std::uint32_t>(b, ef(latent, 32), get<std::uint32_t>(b, ef(latent, 32)) + 8); }));
  g.reject("record/field.extra.bounds.jemr", "record", "field.extra.bounds", "corrupt_data", "the last name runs past meta_size",
           patched([&](bytes& b) { put<std::uint16_t>(b, ef(clip, 36), 100); }));
  g.reject("record/field.name.padding.jemr", "record", "field.name.padding", "corrupt_data", "a non-zero byte after the name 'caption'",
           patched([&](bytes& b) { b[get<std::uint32_t>(b, ef(caption, 32)) + 7] = 1; }));
  g.reject("record/field.name.utf8.jemr", "record", "field.name.utf8", "invalid_utf8", "name bytes 'capti\\xff\\xfe'",
           patched([&](bytes& b) {
             b[get<std::uint32_t>(b, ef(caption, 32)) + 5] = 0xff;
             b[get<std::uint32_t>(b, ef(caption, 32)) + 6] = 0xfe;
           }));
  g.reject("record/field.payload_offset.align.jemr", "record", "field.payload_offset.align", "corrupt_data", "payload offset + 8",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(latent, 0), get<std::uint64_t>(b, ef(latent, 0)) + 8); }));
  g.reject("record/field.payload_offset.canonical.jemr", "record", "field.payload_offset.canonical", "corrupt_data",
           "payload offset + 64 (a gap)",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(latent, 0), get<std::uint64_t>(b, ef(latent, 0)) + 64); }));
  g.reject("record/field.payload_offset.overlap.jemr", "record", "field.payload_offset.canonical", "corrupt_data",
           "payload offset - 64 (overlaps the previous payload)",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(latent, 0), get<std::uint64_t>(b, ef(latent, 0)) - 64); }));
  g.reject("record/field.payload.bounds.jemr", "record", "field.payload.bounds", "corrupt_data", "the last payload runs past record_size",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(clip, 8), 1000); }));
  g.reject("record/field.flags.jemr", "record", "field.flags", "corrupt_data", "entry flags 1 in a 1.0 record",
           patched([&](bytes& b) { b[ef(latent, 43)] = 1; }));
  g.reject("record/field.reserved.jemr", "record", "field.reserved", "corrupt_data", "reserved entry byte 44 set in a 1.0 record",
           patched([&](bytes& b) { b[ef(latent, 44)] = 1; }));
  g.reject("record/field.kind.unknown.jemr", "record", "field.kind.unknown", "corrupt_data", "kind 6 in a 1.0 record",
           patched([&](bytes& b) { b[ef(blob, 38)] = 6; }));
  g.reject("record/field.codec.unknown.jemr", "record", "field.codec.unknown", "unsupported_codec", "codec 5 in a 1.0 record",
           patched([&](bytes& b) { b[ef(blob, 39)] = 5; }));
  g.reject("record/field.dtype.unknown.jemr", "record", "field.dtype.unknown", "corrupt_data", "dtype 10 in a 1.0 record",
           patched([&](bytes& b) { b[ef(latent, 40)] = 10; }));
  const std::size_t latent_dims = get<std::uint32_t>(basic, ef(latent, 32));
  g.reject("record/field.extent.negative.jemr", "record", "field.extent.negative", "corrupt_data", "extent -2",
           patched([&](bytes& b) { put<std::int64_t>(b, latent_dims, -2); }));
  g.reject("record/field.shape.overflow.jemr", "record", "field.shape.overflow", "shape_overflow", "shape [2^33, 2^33]",
           patched([&](bytes& b) {
             put<std::int64_t>(b, latent_dims, std::int64_t{1} << 33);
             put<std::int64_t>(b, latent_dims + 8, std::int64_t{1} << 33);
           }));
  {
    // The product rule is exact: a zero extent does not hide the others, whatever its place (docs/format.md,
    // rule 2 of the field rules); the bound is 2^63 - 1 (signed 64-bit), for the extents and the bytes.
    auto zero_field = [&](std::uint8_t dtype, std::vector<std::int64_t> dims) {
      record_spec r;
      r.fields.push_back(raw_field("t", k_tensor, {}, dtype, std::move(dims)));
      return record(r);
    };
    const std::int64_t p40 = std::int64_t{1} << 40;
    g.reject("record/field.shape.overflow.zero_last.jemr", "record", "field.shape.overflow", "shape_overflow",
             "u8[2^40, 2^40, 0]: no elements, but the non-zero extents multiply past 2^63 - 1", zero_field(u8, {p40, p40, 0}));
    g.reject("record/field.shape.overflow.zero_first.jemr", "record", "field.shape.overflow", "shape_overflow",
             "u8[0, 2^40, 2^40]: the same extents with the zero first", zero_field(u8, {0, p40, p40}));
    g.reject("record/field.shape.overflow.signed.jemr", "record", "field.shape.overflow", "shape_overflow",
             "u8[0, 2^62, 2]: the non-zero extents multiply to 2^63 (fits 64 bits unsigned, not signed)",
             zero_field(u8, {0, std::int64_t{1} << 62, 2}));
    g.reject("record/field.shape.overflow.bytes.jemr", "record", "field.shape.overflow", "shape_overflow",
             "f32[0, 2^31, 2^31]: 2^62 elements' worth of extents times 4 bytes passes 2^63 - 1",
             zero_field(f32, {0, std::int64_t{1} << 31, std::int64_t{1} << 31}));
  }
  g.reject("record/field.elements.limit.jemr", "record", "field.elements.limit", "limit_exceeded", "shape [2^16, 2^15] > max_elements",
           patched([&](bytes& b) {
             put<std::int64_t>(b, latent_dims, std::int64_t{1} << 16);
             put<std::int64_t>(b, latent_dims + 8, std::int64_t{1} << 15);
           }));
  g.reject("record/field.decoded.limit.jemr", "record", "field.decoded.limit", "limit_exceeded", "decoded_size 2^31 + 1 > max_decoded_bytes",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(meta, 16), (1ull << 31) + 1); }));
  g.reject("record/field.shuffle.value.jemr", "record", "field.shuffle.value", "corrupt_data", "shuffle 3",
           patched([&](bytes& b) { b[ef(ids, 42)] = 3; }));
  g.reject("record/field.shuffle.codec.jemr", "record", "field.shuffle.codec", "corrupt_data", "shuffle 4 on a raw field",
           patched([&](bytes& b) { b[ef(latent, 42)] = 4; }));
  g.reject("record/field.raw.size.jemr", "record", "field.raw.size", "corrupt_data", "raw payload of 5 bytes, decoded_size 6",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(blob, 16), 6); }));
  g.reject("record/field.codec.kind.jemr", "record", "field.codec.kind", "unsupported_codec", "a text field with codec zstd",
           patched([&](bytes& b) { b[ef(summary, 39)] = c_zstd; }));
  g.reject("record/field.decoded_size.shape.jemr", "record", "field.decoded_size.shape", "corrupt_data", "i64[4] with decoded_size 24",
           patched([&](bytes& b) { put<std::uint64_t>(b, ef(ids, 16), 24); }));
  {
    for (std::uint8_t k : {k_bytes, k_text, k_json}) {
      record_spec r;
      field f = raw_field("x", k, str("hello"), u8, {5});
      r.fields.push_back(f);
      const char* names[] = {"bytes", "", "", "text", "", "json"};
      g.reject(std::string("record/field.rank.kind.") + names[k] + ".jemr", "record", "field.rank.kind", "corrupt_data",
               std::string("a ") + names[k] + " field of rank 1", record(r));
    }
  }
  g.reject("record/field.dtype.unshaped.jemr", "record", "field.dtype.unshaped", "corrupt_data", "a bytes field of dtype f32",
           patched([&](bytes& b) { b[ef(blob, 40)] = f32; }));
  g.reject("record/field.decoded_size.encoded.jemr", "record", "field.decoded_size.encoded", "corrupt_data",
           "a video field without a shape declaring decoded_size 5", patched([&](bytes& b) { put<std::uint64_t>(b, ef(clip, 16), 5); }));
  {
    // meta_size 8 bytes past the names (the first payload offset does not move: it is align64(meta_size)).
    if (align(meta_size + 8, 64) != align(meta_size, 64)) throw std::runtime_error("basic record: meta_size sits at a 64-byte boundary");
    g.reject("record/rec.meta_size.end.jemr", "record", "rec.meta_size.end", "corrupt_data", "meta_size 8 bytes past the last name",
             patched([&](bytes& b) { put<std::uint32_t>(b, 20, static_cast<std::uint32_t>(meta_size + 8)); }));
    bytes b = cat(basic, bytes(64));
    put<std::uint64_t>(b, 24, b.size());
    seal_record(b);
    g.reject("record/rec.record_size.end.jemr", "record", "rec.record_size.end", "corrupt_data", "64 zero bytes after the last payload",
             b);
  }
  {
    record_spec r;
    r.fields.push_back(raw_field("a", k_bytes, {1}));
    r.fields.push_back(raw_field("a", k_bytes, {2}));
    g.reject("record/rec.names.unique.jemr", "record", "rec.names.unique", "corrupt_data", "two fields named 'a'", record(r));
  }
  // verify(): padding and payload checksums.
  if (meta_size % 64 == 0) throw std::runtime_error("basic record: no padding after meta_size");
  g.reject("record/rec.padding.meta.jemr", "record", "rec.padding", "corrupt_data", "a non-zero byte between meta_size and payload 0",
           patched([&](bytes& b) { b[meta_size] = 1; }, false));
  g.reject("record/rec.padding.payload.jemr", "record", "rec.padding", "corrupt_data", "a non-zero byte after the payload of 'blob'",
           patched([&](bytes& b) { b[get<std::uint64_t>(b, ef(blob, 0)) + 5] = 1; }, false));
  g.reject("record/rec.padding.end.jemr", "record", "rec.padding", "corrupt_data", "the last byte of the record set",
           patched([&](bytes& b) { b.back() = 1; }, false));
  g.reject("record/field.checksum.jemr", "record", "field.checksum", "checksum_mismatch", "a payload byte of 'latent' flipped",
           patched([&](bytes& b) { b[get<std::uint64_t>(b, ef(latent, 0)) + 3] ^= 0x10; }, false));
  g.reject("record/field.checksum.encoded.jemr", "record", "field.checksum", "checksum_mismatch",
           "a payload byte of 'clip' (codec video, never decoded) flipped",
           patched([&](bytes& b) { b[get<std::uint64_t>(b, ef(clip, 0))] ^= 0x01; }, false));

  // decode(): payload contents.
  auto one = [](field f) {
    record_spec r;
    r.fields.push_back(std::move(f));
    return record(r);
  };
  g.reject("record/field.zstd.frame.jemr", "record", "field.zstd.frame", "decode_failed", "a zstd payload that is not a zstd frame",
           one(field{"z", k_bytes, c_zstd, u8, {}, str("not a zstd frame at all"), 5}));
  {
    bytes f = zstd_frame(str("hello"));
    f.resize(f.size() - 2);
    g.reject("record/field.zstd.truncated.jemr", "record", "field.zstd.truncated", "truncated", "a zstd frame cut short",
             one(field{"z", k_bytes, c_zstd, u8, {}, f, 5}));
  }
  g.reject("record/field.zstd.size.more.jemr", "record", "field.zstd.size", "corrupt_data", "the frame holds 6 bytes, decoded_size 5",
           one(field{"z", k_bytes, c_zstd, u8, {}, zstd_frame(str("hello!")), 5}));
  g.reject("record/field.zstd.size.less.jemr", "record", "field.zstd.size", "corrupt_data", "the frame holds 5 bytes, decoded_size 6",
           one(field{"z", k_bytes, c_zstd, u8, {}, zstd_frame(str("hello")), 6}));
  g.reject("record/field.zstd.size.text.jemr", "record", "field.zstd.size", "corrupt_data",
           "a text-codec frame holds 5 bytes, decoded_size 4", one(field{"z", k_text, c_text, u8, {}, zstd_frame(str("hello")), 4}));
  g.reject("record/field.zstd.window.jemr", "record", "field.zstd.window", "limit_exceeded",
           "a frame asking for a 2^28-byte window", one(field{"z", k_bytes, c_zstd, u8, {}, zstd_frame_big_window(str("hello")), 5}));
  g.reject("record/field.zstd.window.sized.jemr", "record", "field.zstd.window", "limit_exceeded",
           "a frame asking for a 2^28-byte window that also declares its content size (5 bytes)",
           one(field{"z", k_bytes, c_zstd, u8, {}, zstd_frame_big_window_sized(str("hello")), 5}));
  g.reject("record/field.zstd.window.later.jemr", "record", "field.zstd.window", "limit_exceeded",
           "a good frame, then a frame asking for a 2^28-byte window",
           one(field{"z", k_bytes, c_zstd, u8, {}, cat(zstd_frame(str("hel")), zstd_frame_big_window_sized(str("lo"))), 5}));
  g.reject("record/field.zstd.checksum.jemr", "record", "field.zstd.checksum", "decode_failed",
           "a zstd frame whose content checksum does not match its content (the payload checksum matches)",
           one(field{"z", k_bytes, c_zstd, u8, {}, zstd_frame_checksummed(str("checked"), 0x01), 7}));
  const bytes bad_utf8 = {'o', 'k', ' ', 0xc3, 0x28};
  g.reject("record/field.utf8.raw_text.jemr", "record", "field.utf8", "invalid_utf8", "raw text with an invalid sequence",
           one(raw_field("t", k_text, bad_utf8)));
  g.reject("record/field.utf8.text_codec.jemr", "record", "field.utf8", "invalid_utf8", "text codec with an invalid sequence",
           one(field{"t", k_text, c_text, u8, {}, zstd_frame(bad_utf8), bad_utf8.size()}));
  g.reject("record/field.utf8.raw_json.jemr", "record", "field.utf8", "invalid_utf8", "raw json with an invalid sequence",
           one(raw_field("j", k_json, bad_utf8)));
  g.reject("record/field.utf8.zstd_json.jemr", "record", "field.utf8", "invalid_utf8", "zstd json with an invalid sequence",
           one(zstd_field("j", k_json, bad_utf8)));
  g.reject("record/field.utf8.overlong.jemr", "record", "field.utf8", "invalid_utf8", "raw text with an overlong '/' (c0 af)",
           one(raw_field("t", k_text, {'a', 0xc0, 0xaf})));
  g.reject("record/field.utf8.surrogate.jemr", "record", "field.utf8", "invalid_utf8", "raw text with a UTF-16 surrogate (ed a0 80)",
           one(raw_field("t", k_text, {'a', 0xed, 0xa0, 0x80})));
}

// Two small records shared by the batch and shard vectors.
record_spec small_a() {
  record_spec r;
  r.fields.push_back(raw_field("txt", k_text, str("first sample")));
  return r;
}
record_spec small_b() {
  record_spec r;
  r.fields.push_back(raw_field("px", k_tensor, {1, 2, 3}, u8, {3}));
  r.fields.push_back(raw_field("info", k_json, str("{\"id\":2}")));
  return r;
}
record_spec small_c() {
  record_spec r;
  r.fields.push_back(zstd_field("z", k_bytes, str("compressed, in a way")));
  return r;
}

void batches(generator& g) {
  const bytes a = record(small_a()), b2 = record(small_b());
  const bytes two = encode_batch({a, b2});
  g.accept("batch/two.jemb", "batch", "two records", two,
           {{"records", json::array({json{{"fields", record_content(small_a())}}, json{{"fields", record_content(small_b())}}})}});
  g.accept("batch/empty.jemb", "batch", "no records", encode_batch({}), {{"records", json::array()}});
  batch_options newer;
  newer.minor = 1;
  newer.header_size = 72;
  newer.entry_size = 24;
  newer.flags = 0x4;
  newer.fill = 0xee;
  const bytes newer_batch = encode_batch({a, b2}, newer);
  g.accept("batch/newer_minor.jemb", "batch",
           "1.1: 72-byte header, 24-byte entries, an optional flag and the reserved bytes used (ignored by 1.0)", newer_batch,
           {{"records", json::array({json{{"fields", record_content(small_a())}}, json{{"fields", record_content(small_b())}}})}});
  {
    bytes b = newer_batch;
    put<std::uint16_t>(b, 6, 0);
    seal_batch(b);
    g.reject("batch/batch.header_size.own_minor.jemb", "batch", "batch.header_size", "corrupt_data",
             "the 1.1 batch relabelled 1.0: header_size 72", b);
  }
  auto patched = [&](auto&& fn, bool reseal = true) {
    bytes b = two;
    fn(b);
    if (reseal) seal_batch(b);
    return b;
  };
  g.reject("batch/batch.size.header.jemb", "batch", "batch.size.header", "truncated", "63 bytes", bytes(two.begin(), two.begin() + 63));
  g.reject("batch/batch.magic.jemb", "batch", "batch.magic", "bad_magic", "magic JEMX", patched([](bytes& b) { b[3] = 'X'; }));
  g.reject("batch/batch.major.jemb", "batch", "batch.major", "unsupported_version", "major 0",
           patched([](bytes& b) { put<std::uint16_t>(b, 4, 0); }));
  g.reject("batch/batch.header_size.jemb", "batch", "batch.header_size", "corrupt_data", "header_size 72 in a 1.0 batch",
           patched([](bytes& b) { put<std::uint16_t>(b, 8, 72); }));
  g.reject("batch/batch.entry_size.jemb", "batch", "batch.entry_size", "corrupt_data", "entry_size 24 in a 1.0 batch",
           patched([](bytes& b) { put<std::uint16_t>(b, 10, 24); }));
  g.reject("batch/batch.flags.required.jemb", "batch", "batch.flags.required", "unsupported_version", "flag bit 31",
           patched([](bytes& b) { put<std::uint32_t>(b, 24, 0x80000000u); }));
  g.reject("batch/batch.flags.optional.jemb", "batch", "batch.flags.optional", "corrupt_data", "flag bit 3 in a 1.0 batch",
           patched([](bytes& b) { put<std::uint32_t>(b, 24, 8); }));
  g.reject("batch/batch.size.limit.jemb", "batch", "batch.size.limit", "limit_exceeded", "batch_size 2^31 + 64",
           patched([](bytes& b) { put<std::uint64_t>(b, 16, (1ull << 31) + 64); }));
  g.reject("batch/batch.size.short.jemb", "batch", "batch.size.short", "truncated", "the last 64 bytes cut off",
           bytes(two.begin(), two.end() - 64));
  g.reject("batch/batch.size.trailing.jemb", "batch", "batch.size.trailing", "corrupt_data", "64 bytes after the batch",
           cat(two, bytes(64)));
  g.reject("batch/batch.table.bounds.jemb", "batch", "batch.table.bounds", "corrupt_data", "record_count 100000",
           patched([](bytes& b) { put<std::uint32_t>(b, 12, 100000); }, false));
  g.reject("batch/batch.checksum.jemb", "batch", "batch.checksum", "checksum_mismatch", "an offset-table byte flipped",
           patched([](bytes& b) { b[64 + 16 + 8] ^= 0x02; }, false));
  g.reject("batch/batch.reserved.jemb", "batch", "batch.reserved", "corrupt_data", "reserved header byte 30 set",
           patched([](bytes& b) { b[30] = 1; }));
  g.reject("batch/batch.padding.jemb", "batch", "batch.padding", "corrupt_data", "a non-zero byte between the table and record 0",
           patched([](bytes& b) { b[100] = 1; }, false));
  g.reject("batch/batch.offset.jemb", "batch", "batch.offset", "corrupt_data", "record 1 offset + 64",
           patched([](bytes& b) { put<std::uint64_t>(b, 80, get<std::uint64_t>(b, 80) + 64); }));
  g.reject("batch/batch.record.bounds.jemb", "batch", "batch.record.bounds", "corrupt_data", "record 1 size runs past batch_size",
           patched([](bytes& b) { put<std::uint64_t>(b, 88, get<std::uint64_t>(b, 88) + 64); }));
  {
    batch_options o;
    o.extra_tail = 64;
    bytes b = encode_batch({a, b2}, o);
    g.reject("batch/batch.end.jemb", "batch", "batch.end", "corrupt_data", "64 bytes after the last record inside batch_size", b);
  }
  g.reject("batch/batch.record.jemb", "batch", "batch.record", "checksum_mismatch", "a byte of record 1's field table flipped",
           patched([&](bytes& b) { b[get<std::uint64_t>(b, 80) + 64 + 8] ^= 0x01; }, false));
  g.reject("batch/batch.record.payload.jemb", "batch", "batch.record", "checksum_mismatch", "a payload byte of record 0 flipped",
           patched([&](bytes& b) { b[get<std::uint64_t>(b, 64) + get<std::uint64_t>(a, 64)] ^= 0x01; }, false));
}

void shards(generator& g) {
  const std::vector<std::pair<std::string, bytes>> recs = {
      {"a/0001", record(small_a())}, {"", record(small_b())}, {"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", record(small_c())}};
  const bytes three = encode_shard(recs);
  json content = json::array();
  content.push_back({{"key", recs[0].first}, {"fields", record_content(small_a())}});
  content.push_back({{"key", recs[1].first}, {"fields", record_content(small_b())}});
  content.push_back({{"key", recs[2].first}, {"fields", record_content(small_c())}});
  g.accept("shard/three.jems", "shard", "three records, keys ascii / empty / UTF-8", three, {{"records", content}});
  g.accept("shard/empty.jems", "shard", "no records: header, empty index, trailer", encode_shard({}), {{"records", json::array()}});
  {
    bytes b = three;
    const std::size_t tt = b.size() - 64;
    put<std::uint16_t>(b, 6, 1);
    put<std::uint16_t>(b, tt + 10, 1);
    for (std::size_t k = 8; k < 64; ++k) b[k] = 0x5a;
    for (std::size_t k = 12; k < 16; ++k) b[tt + k] = 0x5a;
    for (std::size_t k = 48; k < 56; ++k) b[tt + k] = 0x5a;
    seal_shard(b, false);
    g.accept("shard/newer_minor.jems", "shard", "1.1: file header bytes 8..63 and the trailer's reserved bytes used (ignored by 1.0)", b,
             {{"records", content}});
  }

  const std::size_t t = three.size() - 64;
  const std::size_t index_offset = get<std::uint64_t>(three, t + 16), index_size = get<std::uint64_t>(three, t + 24);
  const std::size_t keys = index_offset + 24 * recs.size();
  auto patched = [&](auto&& fn, int reseal = 2) {  // 0: nothing, 1: trailer checksum, 2: index and trailer checksums
    bytes b = three;
    fn(b);
    if (reseal) seal_shard(b, reseal == 2);
    return b;
  };
  g.reject("shard/shard.size.header.jems", "shard", "shard.size.header", "truncated", "32 bytes", bytes(three.begin(), three.begin() + 32));
  g.reject("shard/shard.magic.jems", "shard", "shard.magic", "bad_magic", "magic JEMZ", patched([](bytes& b) { b[3] = 'Z'; }, 0));
  g.reject("shard/shard.major.jems", "shard", "shard.major", "unsupported_version", "file header major 2",
           patched([](bytes& b) { put<std::uint16_t>(b, 4, 2); }, 0));
  g.reject("shard/shard.size.jems", "shard", "shard.size", "truncated", "one byte appended (size not a multiple of 64)", cat(three, bytes(1)));
  g.reject("shard/shard.size.header_only.jems", "shard", "shard.size", "truncated", "the 64-byte file header alone",
           bytes(three.begin(), three.begin() + 64));
  g.reject("shard/shard.trailer.magic.jems", "shard", "shard.trailer.magic", "truncated", "the trailer cut off (writer never closed)",
           bytes(three.begin(), three.end() - 64));
  g.reject("shard/shard.trailer.magic.flip.jems", "shard", "shard.trailer.magic", "truncated", "trailer magic JEMSHIDY",
           patched([&](bytes& b) { b[t + 7] = 'Y'; }, 0));
  g.reject("shard/shard.trailer.checksum.jems", "shard", "shard.trailer.checksum", "checksum_mismatch", "record_count changed",
           patched([&](bytes& b) { b[t + 32] ^= 0x01; }, 0));
  g.reject("shard/shard.trailer.major.jems", "shard", "shard.trailer.major", "unsupported_version", "trailer major 2",
           patched([&](bytes& b) { put<std::uint16_t>(b, t + 8, 2); }, 1));
  g.reject("shard/shard.header.minor.jems", "shard", "shard.header.minor", "corrupt_data", "file header minor 1, trailer minor 0",
           patched([](bytes& b) { put<std::uint16_t>(b, 6, 1); }, 0));
  g.reject("shard/shard.header.reserved.jems", "shard", "shard.header.reserved", "corrupt_data", "file header byte 8 set",
           patched([](bytes& b) { b[8] = 1; }, 0));
  g.reject("shard/shard.header.reserved.last.jems", "shard", "shard.header.reserved", "corrupt_data", "file header byte 63 set",
           patched([](bytes& b) { b[63] = 0x80; }, 0));
  g.reject("shard/shard.trailer.reserved.jems", "shard", "shard.trailer.reserved", "corrupt_data", "trailer byte 12 set",
           patched([&](bytes& b) { b[t + 12] = 1; }, 1));
  g.reject("shard/shard.trailer.reserved.late.jems", "shard", "shard.trailer.reserved", "corrupt_data", "trailer byte 50 set",
           patched([&](bytes& b) { b[t + 50] = 1; }, 1));
  g.reject("shard/shard.index.bounds.jems", "shard", "shard.index.bounds", "corrupt_data", "index_offset + 64",
           patched([&](bytes& b) { put<std::uint64_t>(b, t + 16, index_offset + 64); }, 1));
  g.reject("shard/shard.index.bounds.size.jems", "shard", "shard.index.bounds", "corrupt_data", "index_size + 64",
           patched([&](bytes& b) { put<std::uint64_t>(b, t + 24, index_size + 64); }, 1));
  g.reject("shard/shard.count.jems", "shard", "shard.count", "corrupt_data", "record_count larger than the index holds",
           patched([&](bytes& b) { put<std::uint64_t>(b, t + 32, index_size / 24 + 1); }, 1));
  g.reject("shard/shard.index.checksum.jems", "shard", "shard.index.checksum", "checksum_mismatch", "a key byte changed",
           patched([&](bytes& b) { b[keys] ^= 0x01; }, 0));
  if ((index_offset + index_size) % 64 == 0) throw std::runtime_error("shard: no index padding");
  g.reject("shard/shard.index.padding.jems", "shard", "shard.index.padding", "corrupt_data", "a non-zero byte after the key area",
           patched([&](bytes& b) { b[index_offset + index_size] = 1; }, 0));
  g.reject("shard/shard.entry.span.jems", "shard", "shard.entry.span", "corrupt_data", "record 1 offset + 64",
           patched([&](bytes& b) { put<std::uint64_t>(b, index_offset + 24, get<std::uint64_t>(b, index_offset + 24) + 64); }));
  g.reject("shard/shard.entry.span.size.jems", "shard", "shard.entry.span", "corrupt_data", "record 0 size not a multiple of 64",
           patched([&](bytes& b) { put<std::uint64_t>(b, index_offset + 8, get<std::uint64_t>(b, index_offset + 8) + 8); }));
  g.reject("shard/shard.entry.limit.jems", "shard", "shard.entry.limit", "limit_exceeded", "records larger than max_record_bytes 128",
           three, {{"max_record_bytes", 128}});
  g.reject("shard/shard.key.span.jems", "shard", "shard.key.span", "corrupt_data", "record 1 key_offset + 1",
           patched([&](bytes& b) { put<std::uint32_t>(b, index_offset + 24 + 16, get<std::uint32_t>(b, index_offset + 24 + 16) + 1); }));
  g.reject("shard/shard.key.utf8.jems", "shard", "shard.key.utf8", "invalid_utf8", "key 'a/0001' with a byte 0xff",
           patched([&](bytes& b) { b[keys + 1] = 0xff; }));
  g.reject("shard/shard.records.end.jems", "shard", "shard.records.end", "corrupt_data", "64 zero bytes between the last record and the index",
           encode_shard(recs, {64, 0}));
  g.reject("shard/shard.keys.end.jems", "shard", "shard.keys.end", "corrupt_data", "a key-area byte no entry uses",
           encode_shard(recs, {0, 1}));
  const std::size_t r1 = get<std::uint64_t>(three, index_offset + 24);
  g.reject("shard/shard.record.jems", "shard", "shard.record", "checksum_mismatch", "a byte of record 1's field table flipped",
           patched([&](bytes& b) { b[r1 + 64 + 3] ^= 0x04; }, 0));
  const std::size_t r2 = get<std::uint64_t>(three, index_offset + 48);
  g.reject("shard/shard.record.payload.jems", "shard", "shard.record", "checksum_mismatch", "a payload byte of record 2 flipped",
           patched([&](bytes& b) { b[r2 + get<std::uint64_t>(b, r2 + 64)] ^= 0x01; }, 0));
}

// ---- manifest ----------------------------------------------------------------------------------

std::vector<vector_file> all_vectors() {
  generator g;
  records(g);
  batches(g);
  shards(g);
  return std::move(g.out);
}

std::string manifest_text(const std::vector<vector_file>& vs) {
  json m;
  m["format"] = "jitembed sample format 1.0 (docs/format.md)";
  m["generator"] = "tests/conformance/conformance.cpp (jitembed-conformance generate DIR)";
  m["procedure"] =
      "Read each file as its type says, with the default decode_limits overridden by 'limits'. A record: parse, then "
      "verify (payload checksums and padding), then decode every field whose codec is raw, zstd or text, in field "
      "order. A batch: parse, then each record as above. A shard: open, then for each record in index order: parse, "
      "verify, decode. 'expect' is 'accept' or the errc of the first error. For accepted files, 'content' lists what "
      "the reader must see: per field name, kind, codec, dtype, shape and (for decoded fields) the decoded bytes in hex.";
  json arr = json::array();
  for (const auto& v : vs) {
    json e = {{"file", v.file}, {"type", v.type}, {"expect", v.expect}, {"rule", v.rule}, {"what", v.what}};
    if (!v.limits.empty()) e["limits"] = v.limits;
    if (!v.content.is_null()) e["content"] = v.content;
    arr.push_back(std::move(e));
  }
  m["vectors"] = std::move(arr);
  return m.dump(1) + "\n";
}

// ---- the C++ reader over one vector ------------------------------------------------------------

struct verdict {
  std::string code = "accept";
  std::string message;
  json content;
};

json shape_of(const jitembed::shape& s) { return json(std::vector<std::int64_t>(s.begin(), s.end())); }

result<json> read_record(const format::record_view& r, const decode_limits& lim) {
  JITEMBED_TRY(r.verify());
  json fields = json::array();
  for (const auto& f : r) {
    std::optional<std::string> d;
    const auto c = static_cast<std::uint8_t>(f.codec());
    if (c == c_raw || c == c_zstd || c == c_text) {
      auto t = f.decode(lim);
      if (!t) return t.error();
      const auto bs = t->bytes();
      d = hex(reinterpret_cast<const std::uint8_t*>(bs.data()), bs.size());
    }
    fields.push_back(field_content(f.name(), static_cast<int>(f.kind()), c, static_cast<int>(f.dtype()),
                                   std::vector<std::int64_t>(f.shape().begin(), f.shape().end()), d));
  }
  return fields;
}

result<json> read_vector(const std::string& type, const byte_buffer& data, const decode_limits& lim) {
  if (type == "record") {
    auto r = format::record_view::parse(data, lim);
    if (!r) return r.error();
    auto f = read_record(*r, lim);
    if (!f) return f.error();
    return json{{"fields", *f}};
  }
  if (type == "batch") {
    auto b = format::batch_view::parse(data, lim);
    if (!b) return b.error();
    json recs = json::array();
    for (const auto& r : *b) {
      auto f = read_record(r, lim);
      if (!f) return f.error();
      recs.push_back({{"fields", *f}});
    }
    return json{{"records", recs}};
  }
  if (type == "shard") {
    auto s = format::shard_reader::parse(data, lim);
    if (!s) return s.error();
    json recs = json::array();
    for (std::size_t i = 0; i < s->size(); ++i) {
      auto r = s->record(i);
      if (!r) return r.error();
      auto f = read_record(*r, lim);
      if (!f) return f.error();
      recs.push_back({{"key", std::string(s->key(i))}, {"fields", *f}});
    }
    return json{{"records", recs}};
  }
  return fail(errc::invalid_argument, "unknown vector type '" + type + "'");
}

decode_limits limits_of(const json& l) {
  decode_limits lim;
  for (const auto& [k, v] : l.items()) {
    const auto n = v.get<std::uint64_t>();
    if (k == "max_record_bytes") lim.max_record_bytes = n;
    else if (k == "max_fields") lim.max_fields = static_cast<std::uint32_t>(n);
    else if (k == "max_dims") lim.max_dims = static_cast<std::uint32_t>(n);
    else if (k == "max_elements") lim.max_elements = n;
    else if (k == "max_decoded_bytes") lim.max_decoded_bytes = n;
    else if (k == "max_name_bytes") lim.max_name_bytes = static_cast<std::uint32_t>(n);
    else if (k == "max_zstd_window_log") lim.max_zstd_window_log = static_cast<std::uint32_t>(n);
    else throw std::runtime_error("unknown limit '" + k + "'");
  }
  return lim;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& p, const void* data, std::size_t n) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

int generate(const fs::path& dir) {
  const auto vs = all_vectors();
  for (const auto& v : vs) write_bytes(dir / v.file, v.data.data(), v.data.size());
  const std::string m = manifest_text(vs);
  write_bytes(dir / "manifest.json", m.data(), m.size());
  std::printf("wrote %zu vectors and manifest.json to %s\n", vs.size(), dir.string().c_str());
  return 0;
}

int check_generated(const fs::path& dir) {
  const auto vs = all_vectors();
  int bad = 0;
  std::set<std::string> expected = {"manifest.json", "README.md"};
  for (const auto& v : vs) {
    expected.insert(v.file);
    const std::string have = fs::exists(dir / v.file) ? read_text(dir / v.file) : std::string("<missing>");
    if (have.size() != v.data.size() || std::memcmp(have.data(), v.data.data(), v.data.size()) != 0) {
      std::printf("DIFFERS: %s (regenerate with: jitembed-conformance generate %s)\n", v.file.c_str(), dir.string().c_str());
      ++bad;
    }
  }
  if (read_text(dir / "manifest.json") != manifest_text(vs)) {
    std::printf("DIFFERS: manifest.json\n");
    ++bad;
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (!expected.count(rel)) {
      std::printf("STRAY: %s is not generated\n", rel.c_str());
      ++bad;
    }
  }
  std::printf("%zu vectors: %s\n", vs.size(), bad ? "committed files differ from the generator" : "committed files match the generator");
  return bad ? 1 : 0;
}

// The rule table of the spec: rows "| `id` | rule | `errc` |" between the "## Conformance rules" heading
// and the next heading.
std::map<std::string, std::string> spec_rules(const fs::path& spec) {
  std::map<std::string, std::string> rules;
  std::istringstream in(read_text(spec));
  std::string line;
  bool inside = false;
  const std::regex row(R"(^\| `([a-z0-9_.]+)` \|.*\| `([a-z0-9_]+)` \|\s*$)");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) inside = line.rfind("## Conformance rules", 0) == 0;
    std::smatch m;
    if (inside && std::regex_match(line, m, row)) rules[m[1]] = m[2];
  }
  return rules;
}

int run(const fs::path& dir, const fs::path& spec) {
  const json m = json::parse(read_text(dir / "manifest.json"));
  int bad = 0, n = 0, accepted = 0;
  std::map<std::string, std::set<std::string>> rule_codes;
  for (const auto& v : m.at("vectors")) {
    ++n;
    const std::string file = v.at("file"), expect = v.at("expect"), rule = v.at("rule");
    const std::string raw = read_text(dir / file);
    byte_buffer data(raw.size());
    if (!raw.empty()) std::memcpy(data.data(), raw.data(), raw.size());
    const decode_limits lim = limits_of(v.value("limits", json::object()));
    auto r = read_vector(v.at("type"), data, lim);
    const std::string got = r ? "accept" : std::string(to_string(r.code()));
    if (got != expect) {
      std::printf("FAIL %s (%s): expected %s, got %s%s%s\n", file.c_str(), rule.c_str(), expect.c_str(), got.c_str(),
                  r ? "" : ": ", r ? "" : r.error().message.c_str());
      ++bad;
      continue;
    }
    if (r) {
      ++accepted;
      if (*r != v.at("content")) {
        std::printf("FAIL %s: content differs\n  expected %s\n  got      %s\n", file.c_str(), v.at("content").dump().c_str(), r->dump().c_str());
        ++bad;
        continue;
      }
    }
    rule_codes[rule].insert(expect);
    std::printf("ok   %-48s %-20s %s\n", file.c_str(), expect.c_str(), r ? "" : r.error().message.c_str());
  }
  const auto rules = spec_rules(spec);
  if (rules.empty()) {
    std::printf("FAIL: no rule table under '## Conformance rules' in %s\n", spec.string().c_str());
    ++bad;
  }
  for (const auto& [id, code] : rules) {
    if (!rule_codes.count(id)) {
      std::printf("FAIL: rule %s of the spec has no vector\n", id.c_str());
      ++bad;
    } else if (rule_codes[id] != std::set<std::string>{code}) {
      std::printf("FAIL: rule %s is %s in the spec but its vectors expect another errc\n", id.c_str(), code.c_str());
      ++bad;
    }
  }
  for (const auto& [id, codes] : rule_codes)
    if (id != "valid" && !rules.count(id)) {
      std::printf("FAIL: vectors name rule %s, which the spec's rule table lacks\n", id.c_str());
      ++bad;
    }
  std::printf("%d vectors (%d accepted, %d rejected), %zu rules of the spec: %d disagreement(s)\n", n, accepted, n - accepted,
              rules.size(), bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if constexpr (std::endian::native != std::endian::little) {
    std::fprintf(stderr, "jitembed-conformance: the generator assumes a little-endian machine\n");
    return 2;
  }
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "generate" && argc == 3) return generate(argv[2]);
    if (cmd == "check-generated" && argc == 3) return check_generated(argv[2]);
    if (cmd == "run" && argc == 4) return run(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitembed-conformance: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr, "usage: jitembed-conformance generate DIR | check-generated DIR | run DIR SPEC\n");
  return 2;
}
