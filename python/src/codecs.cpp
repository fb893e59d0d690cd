// Bindings of the codecs: JPEG (TurboJPEG), video (FFmpeg), zstd (+ dictionaries, byte shuffle) and text.
// Every decode / encode releases the GIL; decoded tensors come back as numpy arrays owning the C++ storage.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/codec/video.hpp"
#include "jitembed/codec/zstd.hpp"

namespace jitembed::python {

using namespace jitembed::codec;

namespace {

pixel_format pixel_format_from(std::string_view f) {
  if (f == "rgb") return pixel_format::rgb;
  if (f == "bgr") return pixel_format::bgr;
  if (f == "gray") return pixel_format::gray;
  raise(errc::invalid_argument, "pixel format '" + std::string(f) + "' is not rgb, bgr or gray");
}

chroma_subsampling subsampling_from(std::string_view s) {
  if (s == "444") return chroma_subsampling::s444;
  if (s == "422") return chroma_subsampling::s422;
  if (s == "420") return chroma_subsampling::s420;
  if (s == "gray") return chroma_subsampling::gray;
  if (s == "440") return chroma_subsampling::s440;
  if (s == "411") return chroma_subsampling::s411;
  raise(errc::invalid_argument, "subsampling '" + std::string(s) + "' is not 444, 422, 420, 440, 411 or gray");
}

const char* subsampling_name(chroma_subsampling s) {
  switch (s) {
    case chroma_subsampling::s444: return "444";
    case chroma_subsampling::s422: return "422";
    case chroma_subsampling::s420: return "420";
    case chroma_subsampling::gray: return "gray";
    case chroma_subsampling::s440: return "440";
    case chroma_subsampling::s411: return "411";
  }
  return "unknown";
}

const char* colorspace_name(jpeg_colorspace c) {
  switch (c) {
    case jpeg_colorspace::ycbcr: return "ycbcr";
    case jpeg_colorspace::rgb: return "rgb";
    case jpeg_colorspace::gray: return "gray";
    case jpeg_colorspace::cmyk: return "cmyk";
    case jpeg_colorspace::ycck: return "ycck";
  }
  return "unknown";
}

nb::bytes buffer_to_bytes(const byte_buffer& b) { return to_bytes(bytes_view(b)); }

struct py_zstd_dictionary {
  zstd_dictionary d;  // a copyable handle (docs/api.md rule 2.4)
  const zstd_dictionary& get() const { return d; }
};

}  // namespace

void register_codecs(nb::module_& m) {
  // ---- JPEG ----------------------------------------------------------------------------------------------
  m.def(
      "decode_jpeg",
      [](nb::handle data, std::string_view format, int width, int height, std::optional<std::tuple<int, int, int, int>> crop,
         bool strict, bool fast_dct, bool fast_upsample, const std::optional<decode_limits>& limits) {
        auto buf = get_buffer(data);
        jpeg_decode_options o;
        o.format = pixel_format_from(format);
        o.target_width = width;
        o.target_height = height;
        if (crop) o.crop = crop_rect{std::get<0>(*crop), std::get<1>(*crop), std::get<2>(*crop), std::get<3>(*crop)};
        o.strict = strict;
        o.fast_dct = fast_dct;
        o.fast_upsample = fast_upsample;
        const auto lim = limits_or_default(limits);
        result<tensor> t = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          t = decode_jpeg(buf->bytes(), o, lim);
        }
        return to_numpy(unwrap(std::move(t)), false);
      },
      nb::arg("data"), nb::arg("format") = "rgb", nb::arg("width") = 0, nb::arg("height") = 0, nb::arg("crop") = nb::none(),
      nb::arg("strict") = true, nb::arg("fast_dct") = false, nb::arg("fast_upsample") = false, nb::arg("limits") = nb::none(),
      "Decodes a JPEG to a new [H, W, C] uint8 array (C = 3 for rgb / bgr, 1 for gray). width / height: resize target "
      "(DCT scaling + antialiased resize; one of them 0 keeps the aspect ratio); crop: (x, y, w, h) after the resize.");
  m.def(
      "encode_jpeg",
      [](const array_in& image, int quality, std::string_view subsampling, std::string_view input_format) {
        jpeg_encode_options o;
        o.quality = quality;
        o.subsampling = subsampling_from(subsampling);
        o.input_format = pixel_format_from(input_format);
        const tensor_view v = to_view(image);
        result<byte_buffer> out = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          out = encode_jpeg(v, o);
        }
        return buffer_to_bytes(unwrap(std::move(out)));
      },
      nb::arg("image"), nb::arg("quality") = 90, nb::arg("subsampling") = "420", nb::arg("input_format") = "rgb",
      "Encodes a [H, W, 3] (rgb / bgr) or [H, W] / [H, W, 1] (gray) uint8 array to JPEG bytes.");
  m.def(
      "probe_jpeg",
      [](nb::handle data) {
        auto buf = get_buffer(data);
        const jpeg_info i = unwrap(probe_jpeg(buf->bytes()));
        nb::dict d;
        d["width"] = i.width;
        d["height"] = i.height;
        d["components"] = i.components;
        d["subsampling"] = subsampling_name(i.subsampling);
        d["colorspace"] = colorspace_name(i.colorspace);
        return d;
      },
      nb::arg("data"), "Reads the header only: width, height, components, subsampling, colorspace.");

  // ---- video ---------------------------------------------------------------------------------------------
  m.def(
      "decode_video",
      [](nb::handle data, int num_frames, std::vector<double> timestamps, int width, int height, int threads,
         const std::optional<decode_limits>& limits) {
        auto buf = get_buffer(data);
        video_decode_options o;
        o.num_frames = num_frames;
        o.timestamps = std::move(timestamps);
        o.width = width;
        o.height = height;
        o.threads = threads;
        const auto lim = limits_or_default(limits);
        result<tensor> t = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          t = decode_video(buf->bytes(), o, lim);
        }
        return to_numpy(unwrap(std::move(t)), false);
      },
      nb::arg("data"), nb::arg("num_frames") = 8, nb::arg("timestamps") = std::vector<double>{}, nb::arg("width") = 0,
      nb::arg("height") = 0, nb::arg("threads") = 0, nb::arg("limits") = nb::none(),
      "Decodes frames of a clip (MP4 / WebM / MKV) to a new [T, H, W, 3] uint8 RGB array: num_frames at uniform stride "
      "(0: all), or the frames at `timestamps` (seconds); width / height: resize to exactly that.");
  m.def(
      "probe_video",
      [](nb::handle data, const std::optional<decode_limits>& limits) {
        auto buf = get_buffer(data);
        const auto lim = limits_or_default(limits);
        result<video_info> r = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          r = probe_video(buf->bytes(), lim);
        }
        const video_info i = unwrap(std::move(r));
        nb::dict d;
        d["container"] = i.container;
        d["codec"] = i.codec;
        d["width"] = i.width;
        d["height"] = i.height;
        d["fps"] = i.fps;
        d["duration_seconds"] = i.duration_seconds;
        d["frame_count"] = i.frame_count;
        d["frame_count_exact"] = i.frame_count_exact;
        return d;
      },
      nb::arg("data"), nb::arg("limits") = nb::none(), "What the container says about the first video stream.");
  m.def(
      "encode_video",
      [](const array_in& frames, double fps, int crf, std::string preset) {
        video_encode_options o;
        o.fps = fps;
        o.crf = crf;
        o.preset = std::move(preset);
        const tensor_view v = to_view(frames);
        result<byte_buffer> out = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          out = encode_video(v, o);
        }
        return buffer_to_bytes(unwrap(std::move(out)));
      },
      nb::arg("frames"), nb::arg("fps") = 24.0, nb::arg("crf") = 23, nb::arg("preset") = "veryfast",
      "Encodes a [T, H, W, 3] uint8 RGB array (even H, W) to H.264 in MP4 (libx264).");

  // ---- zstd ----------------------------------------------------------------------------------------------
  nb::class_<py_zstd_dictionary>(m, "ZstdDictionary", "A zstd dictionary (immutable, shared between threads).")
      .def_static("train",
                  [](const std::vector<nb::bytes>& samples, std::size_t capacity) {
                    std::vector<bytes_view> views;
                    views.reserve(samples.size());
                    for (const auto& s : samples) views.push_back(bytes_view(static_cast<const std::byte*>(s.data()), s.size()));
                    nb::gil_scoped_release nogil;
                    return py_zstd_dictionary{unwrap(zstd_dictionary::create(views, capacity))};
                  },
                  nb::arg("samples"), nb::arg("capacity") = 16384,
                  "Trains a dictionary of at most `capacity` bytes (needs dozens of samples at least).")
      .def_static("load",
                  [](nb::handle data) {
                    auto buf = get_buffer(data);
                    return py_zstd_dictionary{unwrap(zstd_dictionary::parse(buf->bytes()))};
                  },
                  nb::arg("data"), "Loads a trained dictionary (or raw content used as a prefix).")
      .def_prop_ro("id", [](const py_zstd_dictionary& d) { return d.get().id(); })
      .def("to_bytes", [](const py_zstd_dictionary& d) { return to_bytes(d.get().bytes()); })
      .def("__len__", [](const py_zstd_dictionary& d) { return d.get().bytes().size(); });

  m.def(
      "zstd_compress",
      [](nb::handle data, int level, std::size_t shuffle, std::optional<const py_zstd_dictionary*> dictionary, bool checksum) {
        auto buf = get_buffer(data);
        zstd_options o;
        o.level = level;
        o.shuffle = shuffle;
        if (dictionary && *dictionary) o.dictionary = (*dictionary)->d;
        o.checksum = checksum;
        const zstd_codec z(std::move(o));
        byte_buffer out(zstd_codec::compress_bound(buf->bytes().size()));
        result<std::size_t> n = std::size_t{0};
        {
          nb::gil_scoped_release nogil;
          n = z.compress(buf->bytes(), out);
        }
        return to_bytes(bytes_view(out.data(), unwrap(std::move(n))));
      },
      nb::arg("data"), nb::arg("level") = 3, nb::arg("shuffle") = 0, nb::arg("dictionary") = nb::none(), nb::arg("checksum") = false,
      "One zstd frame of `data` (byte-shuffled by element size 2 / 4 / 8 first when shuffle is set).");
  m.def(
      "zstd_decompress",
      [](nb::handle data, std::size_t shuffle, std::optional<const py_zstd_dictionary*> dictionary,
         const std::optional<decode_limits>& limits) {
        auto buf = get_buffer(data);
        zstd_options o;
        o.shuffle = shuffle;
        if (dictionary && *dictionary) o.dictionary = (*dictionary)->d;
        const zstd_codec z(std::move(o));
        const auto lim = limits_or_default(limits);
        result<tensor> t = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          t = z.decompress(buf->bytes(), lim);
        }
        return to_bytes(unwrap(std::move(t)).bytes());
      },
      nb::arg("data"), nb::arg("shuffle") = 0, nb::arg("dictionary") = nb::none(), nb::arg("limits") = nb::none(),
      "Decompresses one zstd frame under `limits` (max_decoded_bytes, max_zstd_window_log).");

  // ---- text ----------------------------------------------------------------------------------------------
  m.def(
      "encode_text",
      [](std::string_view text, int level) { return buffer_to_bytes(unwrap(encode_text(text, level))); },
      nb::arg("text"), nb::arg("level") = 3, "UTF-8 text as one zstd frame (the text codec).");
  m.def(
      "decode_text",
      [](nb::handle data, const std::optional<decode_limits>& limits) {
        auto buf = get_buffer(data);
        return unwrap(decode_text(buf->bytes(), limits_or_default(limits)));
      },
      nb::arg("data"), nb::arg("limits") = nb::none(), "Decompresses and validates UTF-8 (the text codec).");
  m.def(
      "encode_tokens",
      [](const array_in& ids, int level) {
        const tensor_view v = to_view(ids);
        return buffer_to_bytes(unwrap(encode_tokens(v, level)));
      },
      nb::arg("ids"), nb::arg("level") = 3, "1-D int32 / int64 token ids: byte-shuffled, then zstd.");
  m.def(
      "decode_tokens",
      [](nb::handle data, std::string_view dtype_name, const std::optional<decode_limits>& limits) {
        auto buf = get_buffer(data);
        return to_numpy(unwrap(decode_tokens(buf->bytes(), dtype_from_name(dtype_name), limits_or_default(limits))), false);
      },
      nb::arg("data"), nb::arg("dtype") = "int32", nb::arg("limits") = nb::none(), "Token ids back as a 1-D array.");
  m.def(
      "validate_utf8",
      [](nb::handle data) {
        auto buf = get_buffer(data);
        unwrap(validate_utf8(buf->bytes()));
      },
      nb::arg("data"), "Raises InvalidUtf8Error unless `data` is strict UTF-8.");
}

}  // namespace jitembed::python
