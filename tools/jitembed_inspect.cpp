// jitembed-inspect FILE [--decode]: recognizes a JPEG, a video container, a jitembed record / batch /
// shard, or a WebDataset tar, and prints its metadata as one JSON object. With --decode every payload is
// decoded fully. Bad input: "error: <errc>: <message>" on stderr and exit code 2; never a crash or hang
// (every decoder runs under decode_limits).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/codec/video.hpp"
#include "jitembed/format.hpp"

namespace {

using namespace jitembed;
using json = nlohmann::ordered_json;

// Thrown to leave main with exit code 2 and the stable error line.
struct inspect_error {
  error_info info;
};

template <class T>
T unwrap(result<T> r) {
  if (!r) throw inspect_error{std::move(r).error()};
  return std::move(r).value();
}
void unwrap(result<void> r) {
  if (!r) throw inspect_error{r.error()};
}

// A name or key from the input as a JSON string: JSON text is UTF-8, so bytes that are not are a format
// error of the input (exit code 2), not a JSON library exception.
std::string utf8(std::string_view s, const std::string& what) {
  if (auto ok = codec::validate_utf8(s); !ok)
    throw inspect_error{fail(errc::invalid_utf8, what + " is not UTF-8: " + ok.error().message)};
  return std::string(s);
}

json shape_json(const shape& s) { return json(std::vector<std::int64_t>(s.begin(), s.end())); }

result<byte_buffer> read_file(const std::string& path, const decode_limits& limits) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return fail(errc::io_error, "cannot open '" + path + "'");
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size > limits.max_record_bytes)
    return fail(errc::limit_exceeded, "file of " + std::to_string(size) + " bytes > max_record_bytes " +
                                          std::to_string(limits.max_record_bytes));
  byte_buffer buf(static_cast<std::size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(size)))
    return fail(errc::io_error, "cannot read '" + path + "'");
  return buf;
}

enum class file_kind { jpeg, record, batch, shard, tar, video };

file_kind detect(bytes_view b) {
  auto at = [&](std::size_t off, std::string_view magic) {
    return b.size() >= off + magic.size() && as_string_view(b.subspan(off, magic.size())) == magic;
  };
  if (at(0, "\xFF\xD8\xFF")) return file_kind::jpeg;
  if (at(0, "JEMR")) return file_kind::record;
  if (at(0, "JEMB")) return file_kind::batch;
  if (at(0, "JEMS")) return file_kind::shard;
  if (at(257, "ustar")) return file_kind::tar;
  return file_kind::video;  // anything else goes to FFmpeg's probe, which whitelists containers
}

const char* subsampling_name(codec::chroma_subsampling s) {
  switch (s) {
    case codec::chroma_subsampling::s444: return "4:4:4";
    case codec::chroma_subsampling::s422: return "4:2:2";
    case codec::chroma_subsampling::s420: return "4:2:0";
    case codec::chroma_subsampling::gray: return "gray";
  }
  return "other";
}

json jpeg_json(bytes_view b, bool decode, const decode_limits& limits) {
  const auto info = unwrap(codec::probe_jpeg(b));
  json j = {{"width", info.width}, {"height", info.height}, {"components", info.components},
            {"subsampling", subsampling_name(info.subsampling)}};
  if (decode) {
    tensor img = unwrap(codec::decode_jpeg(b, {}, limits));
    j["decoded_shape"] = shape_json(img.shape());
    j["decoded_xxh3"] = xxh3_128(img.bytes()).to_hex();
  }
  return j;
}

json video_json(bytes_view b, bool decode, const decode_limits& limits) {
  const auto info = unwrap(codec::probe_video(b, limits));
  json j = {{"container", info.container}, {"codec", info.codec},       {"width", info.width},
            {"height", info.height},       {"fps", info.fps},           {"duration_seconds", info.duration_seconds},
            {"frame_count", info.frame_count}, {"frame_count_exact", info.frame_count_exact}};
  if (decode) {
    codec::video_decode_options opts;
    opts.num_frames = static_cast<int>(std::clamp<std::int64_t>(info.frame_count, 1, limits.max_video_frames));
    tensor frames = unwrap(codec::decode_video(b, opts, limits));
    j["decoded_shape"] = shape_json(frames.shape());
    j["decoded_xxh3"] = xxh3_128(frames.bytes()).to_hex();
  }
  return j;
}

json record_json(const format::record_view& rec, bool decode, const decode_limits& limits) {
  json fields = json::array();
  for (const auto& f : rec) {
    json jf = {{"name", utf8(f.name(), "field " + std::to_string(f.index()) + " name")},
               {"kind", std::string(format::to_string(f.kind()))},
               {"codec", std::string(codec::to_string(f.codec()))},
               {"payload_bytes", f.payload().size()},
               {"payload_offset", f.payload().data() - rec.bytes().data()}};
    if (f.kind() == format::field_kind::tensor) {
      jf["dtype"] = std::string(to_string(f.dtype()));
      jf["shape"] = shape_json(f.shape());
    }
    if (f.decoded_size()) jf["decoded_size"] = f.decoded_size();
    if (!f.is_known()) jf["known"] = false;
    if (decode && f.is_known()) {
      unwrap(f.verify());
      if (f.codec() == codec::codec_id::jpeg) {
        jf["image"] = jpeg_json(f.payload(), true, limits);
      } else if (f.codec() == codec::codec_id::video) {
        jf["video"] = video_json(f.payload(), true, limits);
      } else {
        tensor t = unwrap(f.decode(limits));
        jf["decoded_shape"] = shape_json(t.shape());
        jf["decoded_xxh3"] = xxh3_128(t.bytes()).to_hex();
      }
    }
    fields.push_back(std::move(jf));
  }
  if (decode) unwrap(rec.verify());
  return {{"version", std::to_string(rec.major()) + "." + std::to_string(rec.minor())},
          {"bytes", rec.bytes().size()},
          {"fields", std::move(fields)}};
}

json inspect(const std::string& path, bool decode, const decode_limits& limits) {
  // Shards and tars are mapped (random access, zero-copy); other inputs are read whole under the limit.
  byte_buffer head;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw inspect_error{fail(errc::io_error, "cannot open '" + path + "'")};
    head.resize(512);
    in.read(reinterpret_cast<char*>(head.data()), 512);
    head.resize(static_cast<std::size_t>(in.gcount()));
  }
  json out = {{"file", path}};
  switch (detect(head)) {
    case file_kind::shard: {
      auto shard = unwrap(format::shard_reader::open(path, limits));
      out["type"] = "jitembed-shard";
      out["records"] = shard.size();
      json recs = json::array();
      for (std::size_t i = 0; i < shard.size(); ++i) {
        json r = record_json(unwrap(shard.record(i)), decode, limits);
        r["key"] = utf8(shard.key(i), "shard key " + std::to_string(i));
        recs.push_back(std::move(r));
      }
      out["record_list"] = std::move(recs);
      return out;
    }
    case file_kind::tar: {
      auto wds = unwrap(format::webdataset_reader::open(path, limits));
      out["type"] = "webdataset-tar";
      out["samples"] = wds.size();
      json samples = json::array();
      for (const auto& s : wds) {
        json members = json::array();
        for (const auto& m : s.members) {
          json jm = {{"name", utf8(m.name, "sample " + std::to_string(samples.size()) + ": member name")}, {"kind", std::string(format::to_string(m.kind))}, {"bytes", m.data.size()}};
          if (decode && m.kind == format::field_kind::image && m.codec == codec::codec_id::jpeg)
            jm["image"] = jpeg_json(m.data, true, limits);
          if (decode && m.kind == format::field_kind::video) jm["video"] = video_json(m.data, true, limits);
          if (decode && m.kind == format::field_kind::text) unwrap(codec::validate_utf8(m.data));
          members.push_back(std::move(jm));
        }
        if (decode) unwrap(format::record_view::parse(unwrap(unwrap(s.to_record()).finish()), limits));
        samples.push_back({{"key", utf8(s.key, "sample " + std::to_string(samples.size()) + ": key")}, {"members", std::move(members)}});
      }
      out["sample_list"] = std::move(samples);
      return out;
    }
    default: break;
  }
  const byte_buffer data = unwrap(read_file(path, limits));
  switch (detect(data)) {
    case file_kind::jpeg:
      out["type"] = "jpeg";
      out.update(jpeg_json(data, decode, limits));
      break;
    case file_kind::record:
      out["type"] = "jitembed-record";
      out.update(record_json(unwrap(format::record_view::parse(data, limits)), decode, limits));
      break;
    case file_kind::batch: {
      auto batch = unwrap(format::batch_view::parse(data, limits));
      out["type"] = "jitembed-batch";
      out["records"] = batch.size();
      json recs = json::array();
      for (std::size_t i = 0; i < batch.size(); ++i) recs.push_back(record_json(batch.record(i), decode, limits));
      out["record_list"] = std::move(recs);
      break;
    }
    default:
      out["type"] = "video";
      out.update(video_json(data, decode, limits));
      break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitembed-inspect: print the metadata of a JPEG, video, jitembed record/batch/shard or WebDataset tar as JSON"};
  std::string path;
  bool decode = false;
  std::uint64_t max_bytes = decode_limits{}.max_record_bytes;
  // Required, but checked after parsing: CLI11 2.1 reports a missing required positional before an unknown
  // flag, so `jitembed-inspect --decod` would say "FILE is required" instead of naming the typo.
  app.add_option("FILE", path, "file to inspect (required)");
  app.add_flag("--decode", decode, "decode every payload fully");
  app.add_option("--max-bytes", max_bytes, "largest file / record accepted (bytes)");
  CLI11_PARSE(app, argc, argv);
  if (path.empty()) return app.exit(CLI::RequiredError("FILE"));

  decode_limits limits;
  limits.max_record_bytes = max_bytes;
  try {
    // The path comes from the command line, not from the input: bytes that are not UTF-8 are replaced.
    std::cout << inspect(path, decode, limits).dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
    return 0;
  } catch (const inspect_error& e) {
    std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(e.info.code)).c_str(), e.info.message.c_str());
  } catch (const jitembed::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: limit_exceeded: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
  }
  return 2;
}
