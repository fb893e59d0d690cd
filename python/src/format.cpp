// Bindings of the sample format: RecordBuilder / RecordView / Field, BatchBuilder / BatchView, ShardWriter /
// ShardReader, WebDatasetReader and Dataset. Readers hand out numpy arrays that point into the record's
// buffer (a mapped shard, or the caller's bytes object) and keep it alive: no copies.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <vector>

#include "common.hpp"
#include "format_types.hpp"
#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/video.hpp"
#include "jitembed/format.hpp"

namespace jitembed::python {

using namespace jitembed::format;

namespace {

nb::tuple shape_tuple(const shape& s) {
  nb::list l;
  for (auto d : s) l.append(d);
  return nb::tuple(l);
}

compression compression_from(std::string_view c) {
  if (c == "raw") return compression::raw;
  if (c == "zstd") return compression::zstd;
  raise(errc::invalid_argument, "compression '" + std::string(c) + "' is not 'raw' or 'zstd'");
}

field_kind kind_from(std::string_view k) {
  for (int i = 0; i < kFieldKindCount; ++i)
    if (to_string(static_cast<field_kind>(i)) == k) return static_cast<field_kind>(i);
  raise(errc::invalid_argument, "unknown field kind '" + std::string(k) + "'");
}

// A tensor decoded from a record: read-only when it points into the record's (shared, maybe mapped) bytes.
nb::object tensor_out(const tensor& t, const std::shared_ptr<const void>& record_owner) {
  const bool shared = record_owner && t.owner().get() == record_owner.get();
  return to_numpy(t, shared);
}

}  // namespace

// ---- Field -----------------------------------------------------------------------------------------------

const field_view& py_field::f() const { return rec[index]; }

nb::object py_field::payload() const { return bytes_array(f().payload(), rec.keep_alive()); }

nb::object py_field::decode(bool verify, const std::optional<decode_limits>& limits) const {
  const auto lim = limits_or_default(limits);
  tensor t;
  {
    nb::gil_scoped_release nogil;
    t = unwrap(f().decode(lim, verify ? checksum_policy::verify : checksum_policy::skip));
  }
  return tensor_out(t, rec.keep_alive());
}

std::string py_field::text(bool verify, const std::optional<decode_limits>& limits) const {
  return unwrap(f().text(limits_or_default(limits), verify ? checksum_policy::verify : checksum_policy::skip));
}

// Every field as a Python value: tensors -> arrays (zero copy when raw), text / json -> str, image / video /
// raw bytes -> a read-only uint8 array of the stored (encoded) bytes, zstd bytes -> their decoded bytes.
nb::object py_field::value(bool verify, const decode_limits& lim) const {
  const field_view& fv = f();
  const auto policy = verify ? checksum_policy::verify : checksum_policy::skip;
  switch (fv.kind()) {
    case field_kind::text:
    case field_kind::json: {
      auto s = unwrap(fv.text(lim, policy));
      return nb::str(s.data(), s.size());
    }
    case field_kind::tensor: {
      auto t = unwrap(fv.decode(lim, policy));
      return tensor_out(t, rec.keep_alive());
    }
    default:
      if (fv.codec() == codec::codec_id::zstd) return tensor_out(unwrap(fv.decode(lim, policy)), rec.keep_alive());
      if (verify) unwrap(fv.verify());
      return bytes_array(fv.payload(), rec.keep_alive());
  }
}

nb::dict record_to_dict(const record_view& rec, bool verify, const decode_limits& lim) {
  if (verify) {  // hash every payload first, without the GIL (a field verified once stays verified)
    result<void> ok;
    {
      nb::gil_scoped_release nogil;
      for (const auto& f : rec)
        if (ok = f.verify(); !ok) break;
    }
    unwrap(std::move(ok));
  }
  nb::dict d;
  for (std::size_t i = 0; i < rec.size(); ++i) {
    py_field f{rec, i};
    const auto name = rec[i].name();
    d[nb::str(name.data(), name.size())] = f.value(verify, lim);
  }
  return d;
}

py_record parse_record(nb::handle data, const std::optional<decode_limits>& limits) {
  auto buf = get_buffer(data);
  const bytes_view b = buf->bytes();
  return py_record{unwrap(record_view::parse(b, limits_or_default(limits), std::shared_ptr<const void>(buf)))};
}

// ---- RecordBuilder ---------------------------------------------------------------------------------------

bytes_view py_builder::keep(nb::handle o) {
  auto b = get_buffer(o);
  refs.push_back(b);
  return b->bytes();
}

nb::bytes py_builder::finish() const {
  const std::size_t n = b.encoded_size();
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
  if (!out) throw nb::python_error();
  nb::bytes r = nb::steal<nb::bytes>(out);
  auto* p = reinterpret_cast<std::byte*>(PyBytes_AS_STRING(out));
  result<std::size_t> w = std::size_t{0};
  {
    nb::gil_scoped_release nogil;
    w = b.write(mutable_bytes(p, n));
  }
  unwrap(std::move(w));
  return r;
}

void register_format(nb::module_& m) {
  nb::class_<py_field>(m, "Field", "One field of a parsed record (valid while any view of its record lives).")
      .def_prop_ro("name", [](const py_field& f) { return std::string(f.f().name()); })
      .def_prop_ro("kind", [](const py_field& f) { return std::string(to_string(f.f().kind())); })
      .def_prop_ro("codec", [](const py_field& f) { return std::string(codec::to_string(f.f().codec())); })
      .def_prop_ro("dtype", [](const py_field& f) { return std::string(to_string(f.f().dtype())); })
      .def_prop_ro("shape", [](const py_field& f) { return shape_tuple(f.f().shape()); })
      .def_prop_ro("decoded_size", [](const py_field& f) { return f.f().decoded_size(); })
      .def_prop_ro("checksum", [](const py_field& f) { return f.f().checksum(); })
      .def_prop_ro("shuffle", [](const py_field& f) { return f.f().shuffle(); })
      .def_prop_ro("index", [](const py_field& f) { return f.index; })
      .def("payload", &py_field::payload,
           "The stored bytes as a read-only uint8 array pointing into the record (no copy, not checksummed).")
      .def("verify", [](const py_field& f) { unwrap(f.f().verify()); }, "Hashes the payload against its checksum.")
      .def("decode", &py_field::decode, nb::arg("verify") = true, nb::arg("limits") = nb::none(),
           "raw / zstd / text fields as an array: a raw field points into the record (read-only, no copy); "
           "tensors keep their dtype and shape, other kinds come back as 1-D uint8.")
      .def("text", &py_field::text, nb::arg("verify") = true, nb::arg("limits") = nb::none(),
           "The UTF-8 text of a text / json / bytes field.")
      .def("value", [](const py_field& f, bool verify, const std::optional<decode_limits>& l) { return f.value(verify, limits_or_default(l)); },
           nb::arg("verify") = true, nb::arg("limits") = nb::none(),
           "The field as a Python value: array (tensor), str (text, json) or read-only uint8 array (encoded bytes).")
      .def("decode_image",
           [](const py_field& f, std::string_view format, int width, int height, bool strict, bool verify,
              const std::optional<decode_limits>& l) {
             codec::jpeg_codec c;
             c.decode_options.format = format == "gray" ? codec::pixel_format::gray
                                       : format == "bgr" ? codec::pixel_format::bgr
                                                         : codec::pixel_format::rgb;
             c.decode_options.target_width = width;
             c.decode_options.target_height = height;
             c.decode_options.strict = strict;
             const auto lim = limits_or_default(l);
             tensor t;
             {
               nb::gil_scoped_release nogil;
               t = unwrap(f.f().decode_with(c, lim, verify ? checksum_policy::verify : checksum_policy::skip));
             }
             return to_numpy(t, false);
           },
           nb::arg("format") = "rgb", nb::arg("width") = 0, nb::arg("height") = 0, nb::arg("strict") = true,
           nb::arg("verify") = true, nb::arg("limits") = nb::none(), "Decodes a JPEG field to [H, W, C] uint8.")
      .def("decode_video",
           [](const py_field& f, int num_frames, int width, int height, bool verify, const std::optional<decode_limits>& l) {
             codec::video_codec c;
             c.decode_options.num_frames = num_frames;
             c.decode_options.width = width;
             c.decode_options.height = height;
             const auto lim = limits_or_default(l);
             tensor t;
             {
               nb::gil_scoped_release nogil;
               t = unwrap(f.f().decode_with(c, lim, verify ? checksum_policy::verify : checksum_policy::skip));
             }
             return to_numpy(t, false);
           },
           nb::arg("num_frames") = 8, nb::arg("width") = 0, nb::arg("height") = 0, nb::arg("verify") = true,
           nb::arg("limits") = nb::none(), "Decodes a video field to [T, H, W, 3] uint8.")
      .def("dlpack",
           [](const py_field& f, bool verify) {
             const tensor t = unwrap(f.f().decode({}, verify ? checksum_policy::verify : checksum_policy::skip));
             const bool shared = t.owner().get() == f.rec.keep_alive().get();
             return to_dlpack_array(t, shared);
           },
           nb::arg("verify") = true,
           "decode() as a framework-neutral DLPack array (keeps bf16; pass it to torch.from_dlpack / numpy.from_dlpack).")
      .def("__repr__", [](const py_field& f) {
        return "<jitembed.Field '" + std::string(f.f().name()) + "' " + std::string(to_string(f.f().kind())) + "/" +
               std::string(codec::to_string(f.f().codec())) + " " + std::string(to_string(f.f().dtype())) +
               f.f().shape().to_string() + " " + std::to_string(f.f().payload().size()) + " bytes>";
      });

  nb::class_<py_record>(m, "RecordView",
                        "A parsed record (zero copy: fields point into the bytes it was parsed from, which it keeps alive).")
      .def_static("parse", &parse_record, nb::arg("data"), nb::arg("limits") = nb::none(),
                  "Checks header, field table and names (payload checksums are checked on access or by verify()).")
      .def("__len__", [](const py_record& r) { return r.rec.size(); })
      .def("__getitem__",
           [](const py_record& r, nb::handle key) {
             if (nb::isinstance<nb::int_>(key)) {
               auto i = nb::cast<std::int64_t>(key);
               if (i < 0) i += static_cast<std::int64_t>(r.rec.size());
               if (i < 0 || static_cast<std::size_t>(i) >= r.rec.size())
                 raise(errc::not_found, "record: field index " + std::to_string(i) + " of " + std::to_string(r.rec.size()));
               return py_field{r.rec, static_cast<std::size_t>(i)};
             }
             const auto name = nb::cast<std::string_view>(key);
             const field_view* f = unwrap(r.rec.get(name));
             return py_field{r.rec, f->index()};
           })
      .def("__contains__", [](const py_record& r, std::string_view name) { return r.rec.find(name) != nullptr; })
      .def("__iter__", [](const py_record& r) {
        nb::list l;
        for (std::size_t i = 0; i < r.rec.size(); ++i) l.append(nb::cast(py_field{r.rec, i}));
        return l.attr("__iter__")();
      })
      .def("keys", [](const py_record& r) {
        std::vector<std::string> k;
        for (const auto& f : r.rec) k.emplace_back(f.name());
        return k;
      })
      .def("verify", [](const py_record& r) {
        nb::gil_scoped_release nogil;
        unwrap(r.rec.verify());
      }, "Checks every payload checksum and that all padding is zero.")
      .def("to_dict",
           [](const py_record& r, bool verify, const std::optional<decode_limits>& l) {
             return record_to_dict(r.rec, verify, limits_or_default(l));
           },
           nb::arg("verify") = true, nb::arg("limits") = nb::none(), "{name: Field.value()} for every field.")
      .def_prop_ro("version", [](const py_record& r) { return nb::make_tuple(r.rec.major(), r.rec.minor()); })
      .def_prop_ro("nbytes", [](const py_record& r) { return r.rec.bytes().size(); })
      .def("bytes", [](const py_record& r) { return bytes_array(r.rec.bytes(), r.rec.keep_alive()); },
           "The encoded record as a read-only uint8 array (no copy).")
      .def("__repr__", [](const py_record& r) {
        return "<jitembed.RecordView " + std::to_string(r.rec.size()) + " fields, " + std::to_string(r.rec.bytes().size()) + " bytes>";
      });

  nb::class_<py_builder>(m, "RecordBuilder",
                         "Assembles one record. Bytes and arrays given to it are referenced (kept alive, not copied) "
                         "until finish(); do not modify them meanwhile.")
      .def(nb::init<>())
      .def("add_image", [](py_builder& s, std::string_view name, nb::handle jpeg) { unwrap(s.b.add_image(name, s.keep(jpeg))); },
           nb::arg("name"), nb::arg("jpeg"), "An encoded JPEG (referenced).")
      .def("add_video", [](py_builder& s, std::string_view name, nb::handle clip) { unwrap(s.b.add_video(name, s.keep(clip))); },
           nb::arg("name"), nb::arg("clip"), "An encoded clip: MP4 / WebM / MKV (referenced).")
      .def("add_text", [](py_builder& s, std::string_view name, std::string_view text, int level) { unwrap(s.b.add_text(name, text, level)); },
           nb::arg("name"), nb::arg("text"), nb::arg("level") = 3,
           "UTF-8 text, zstd-compressed at `level` when that saves a 64-byte block (0: raw).")
      .def("add_json",
           [](py_builder& s, std::string_view name, std::string_view json, bool zstd, int level) {
             unwrap(s.b.add_json(name, json, zstd ? compression::zstd : compression::raw, level));
           },
           nb::arg("name"), nb::arg("json"), nb::arg("zstd") = false, nb::arg("level") = 3, "JSON text (validated as UTF-8 only).")
      .def("add_tensor",
           [](py_builder& s, std::string_view name, const array_in& a, std::string_view comp, int level, int shuffle) {
             const tensor_view v = to_view(a);
             tensor_encoding enc;
             enc.method = compression_from(comp);
             enc.level = level;
             enc.shuffle = static_cast<std::uint8_t>(shuffle);
             unwrap(s.b.add_tensor(name, v, enc));
             if (enc.method == compression::raw) s.arrays.push_back(a);
           },
           nb::arg("name"), nb::arg("array"), nb::arg("compression") = "raw", nb::arg("level") = 3, nb::arg("shuffle") = 0,
           "A C-contiguous array: raw (referenced; reads back zero copy) or zstd (+ byte shuffle 2/4/8).")
      .def("add_bytes",
           [](py_builder& s, std::string_view name, nb::handle data, std::string_view comp, int level) {
             const auto c = compression_from(comp);
             unwrap(s.b.add_bytes(name, s.keep(data), c, level));
           },
           nb::arg("name"), nb::arg("data"), nb::arg("compression") = "raw", nb::arg("level") = 3, "Opaque bytes, raw or zstd.")
      .def("add_encoded",
           [](py_builder& s, std::string_view name, std::string_view kind, std::string_view codec_name, nb::handle payload,
              std::optional<std::string> dtype_name, std::optional<std::vector<std::int64_t>> dims, std::uint64_t decoded_size) {
             codec::codec_id c = codec::codec_id::raw;
             bool found = false;
             for (int i = 0; i <= 4; ++i)
               if (codec::to_string(static_cast<codec::codec_id>(i)) == codec_name) c = static_cast<codec::codec_id>(i), found = true;
             if (!found) raise(errc::unsupported_codec, "unknown codec '" + std::string(codec_name) + "'");
             const bytes_view p = s.keep(payload);
             encoded_info info;
             if (dtype_name) info.dtype = dtype_from_name(*dtype_name);
             if (dims) info.shape = shape(std::span<const std::int64_t>(*dims));
             info.decoded_size = decoded_size ? decoded_size : (c == codec::codec_id::raw ? p.size() : 0);
             unwrap(s.b.add_encoded(name, kind_from(kind), c, p, info));
           },
           nb::arg("name"), nb::arg("kind"), nb::arg("codec"), nb::arg("payload"), nb::arg("dtype") = nb::none(),
           nb::arg("shape") = nb::none(), nb::arg("decoded_size") = 0,
           "A payload already encoded by `codec` (referenced), with the decoded dtype / shape / size where known "
           "(decoded_size 0: the payload size for codec raw, unknown otherwise).")
      .def("add_image_array",
           [](py_builder& s, std::string_view name, const array_in& image, int quality) {
             codec::jpeg_codec c;
             c.encode_options.quality = quality;
             const tensor_view v = to_view(image);
             result<void> r;
             {
               nb::gil_scoped_release nogil;
               r = s.b.add_encoded_with(name, field_kind::image, c, v);
             }
             unwrap(std::move(r));
           },
           nb::arg("name"), nb::arg("image"), nb::arg("quality") = 90, "Encodes a [H, W, 3] uint8 RGB array as JPEG into the record.")
      .def("add_field",
           [](py_builder& s, const py_field& f) {
             unwrap(s.b.add_field(f.f()));
             s.records.push_back(f.rec);
           },
           nb::arg("field"), "A field of a parsed record, referenced with its stored checksum.")
      .def("__len__", [](const py_builder& s) { return s.b.size(); })
      .def_prop_ro("encoded_size", [](const py_builder& s) { return s.b.encoded_size(); })
      .def("clear", [](py_builder& s) {
        s.b.clear();
        s.refs.clear();
        s.arrays.clear();
        s.records.clear();
      })
      .def("finish", &py_builder::finish, "The encoded record as bytes (the one copy of each payload).");

  // ---- batches -------------------------------------------------------------------------------------------
  struct py_batch_builder {
    batch_builder b;
    std::vector<nb::object> keep;
  };
  nb::class_<py_batch_builder>(m, "BatchBuilder", "A batch of records (offset table + 64-byte aligned records).")
      .def(nb::init<>())
      .def("append",
           [](py_batch_builder& s, nb::handle item) {
             if (nb::isinstance<py_builder>(item)) {
               unwrap(s.b.append(nb::cast<const py_builder&>(item).b));
             } else if (nb::isinstance<py_record>(item)) {
               const auto& r = nb::cast<const py_record&>(item);
               unwrap(s.b.append(r.rec.bytes()));
             } else {
               auto buf = get_buffer(item);
               unwrap(s.b.append(buf->bytes()));
             }
             s.keep.push_back(nb::borrow(item));
           },
           nb::arg("record"), "Appends a RecordBuilder (referenced), a RecordView or an encoded record (bytes).")
      .def("__len__", [](const py_batch_builder& s) { return s.b.size(); })
      .def_prop_ro("encoded_size", [](const py_batch_builder& s) { return s.b.encoded_size(); })
      .def("finish", [](const py_batch_builder& s) {
        const std::size_t n = s.b.encoded_size();
        PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
        if (!out) throw nb::python_error();
        nb::bytes r = nb::steal<nb::bytes>(out);
        unwrap(s.b.write(mutable_bytes(reinterpret_cast<std::byte*>(PyBytes_AS_STRING(out)), n)));
        return r;
      });

  struct py_batch {
    batch_view v;
  };
  nb::class_<py_batch>(m, "BatchView", "A parsed batch: records sharing the batch's bytes (kept alive).")
      .def_static("parse",
                  [](nb::handle data, const std::optional<decode_limits>& limits) {
                    auto buf = get_buffer(data);
                    return py_batch{unwrap(batch_view::parse(buf->bytes(), limits_or_default(limits), std::shared_ptr<const void>(buf)))};
                  },
                  nb::arg("data"), nb::arg("limits") = nb::none())
      .def("__len__", [](const py_batch& b) { return b.v.size(); })
      .def("__getitem__", [](const py_batch& b, std::int64_t i) {
        if (i < 0) i += static_cast<std::int64_t>(b.v.size());
        if (i < 0 || static_cast<std::size_t>(i) >= b.v.size()) throw nb::index_error();
        return py_record{b.v[static_cast<std::size_t>(i)]};
      });

  // ---- shards --------------------------------------------------------------------------------------------
  struct py_shard_writer {
    shard_writer w;
  };
  nb::class_<py_shard_writer>(m, "ShardWriter", "Appends records to a .jems shard; close() writes the index.")
      .def_static("create",
                  [](const std::string& path) { return py_shard_writer{unwrap(shard_writer::create(path))}; }, nb::arg("path"),
                  "Creates (or truncates) `path`.")
      .def("append",
           [](py_shard_writer& s, nb::handle record, std::string_view key) {
             if (nb::isinstance<py_builder>(record)) {
               const auto& b = nb::cast<const py_builder&>(record);
               result<void> r;
               {
                 nb::gil_scoped_release nogil;
                 r = s.w.append(b.b, key);
               }
               unwrap(std::move(r));
               return;
             }
             std::shared_ptr<py_buffer> buf;
             bytes_view bytes;
             if (nb::isinstance<py_record>(record)) {
               bytes = nb::cast<const py_record&>(record).rec.bytes();
             } else {
               buf = get_buffer(record);
               bytes = buf->bytes();
             }
             result<void> r;
             {
               nb::gil_scoped_release nogil;
               r = s.w.append(bytes, key);
             }
             unwrap(std::move(r));
           },
           nb::arg("record"), nb::arg("key") = "", "Appends a RecordBuilder, a RecordView or an encoded record.")
      .def("close", [](py_shard_writer& s) {
        nb::gil_scoped_release nogil;
        unwrap(s.w.close());
      })
      .def("__len__", [](const py_shard_writer& s) { return s.w.size(); })
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_shard_writer& s, nb::args) {
        nb::gil_scoped_release nogil;
        unwrap(s.w.close());
      });

  struct py_shard_reader {
    shard_reader r;
  };
  nb::class_<py_shard_reader>(m, "ShardReader", "Random access to the records of a .jems shard through one read-only mapping.")
      .def_static("open",
                  [](const std::string& path, const std::optional<decode_limits>& limits) {
                    nb::gil_scoped_release nogil;
                    return py_shard_reader{unwrap(shard_reader::open(path, limits_or_default(limits)))};
                  },
                  nb::arg("path"), nb::arg("limits") = nb::none())
      .def_static("parse",
                  [](nb::handle data, const std::optional<decode_limits>& limits) {
                    auto buf = get_buffer(data);
                    return py_shard_reader{unwrap(shard_reader::parse(buf->bytes(), limits_or_default(limits), std::shared_ptr<const void>(buf)))};
                  },
                  nb::arg("data"), nb::arg("limits") = nb::none(), "A shard held in memory (bytes-like; kept alive).")
      .def("__len__", [](const py_shard_reader& s) { return s.r.size(); })
      .def("__getitem__", [](const py_shard_reader& s, std::int64_t i) {
        if (i < 0) i += static_cast<std::int64_t>(s.r.size());
        if (i < 0) raise(errc::not_found, "shard: negative record index");
        return py_record{unwrap(s.r.record(static_cast<std::size_t>(i)))};
      }, nb::arg("i"), "Record i, parsed (the view shares the mapping).")
      .def("key", [](const py_shard_reader& s, std::size_t i) {
        if (i >= s.r.size()) raise(errc::not_found, "shard: record " + std::to_string(i) + " of " + std::to_string(s.r.size()));
        return std::string(s.r.key(i));
      })
      .def("keys", [](const py_shard_reader& s) {
        std::vector<std::string> k;
        for (std::size_t i = 0; i < s.r.size(); ++i) k.emplace_back(s.r.key(i));
        return k;
      })
      .def("record_bytes", [](const py_shard_reader& s, std::size_t i) {
        if (i >= s.r.size()) raise(errc::not_found, "shard: record " + std::to_string(i) + " of " + std::to_string(s.r.size()));
        return bytes_array(s.r.record_bytes(i), s.r.keep_alive());
      }, "The encoded bytes of record i as a read-only uint8 array into the mapping.")
      .def("_address", [](const py_shard_reader& s) { return reinterpret_cast<std::uintptr_t>(s.r.bytes().data()); },
           "The address of the mapping's first byte.")
      .def_prop_ro("nbytes", [](const py_shard_reader& s) { return s.r.bytes().size(); });

  // ---- WebDataset ----------------------------------------------------------------------------------------
  struct py_wds {
    webdataset_reader r;
  };
  auto member_value = [](const wds_member& mb, const std::shared_ptr<const void>& keep) -> nb::object {
    if (mb.kind == field_kind::tensor) {
      const tensor t = tensor::wrap(keep, tensor_view(mb.data.data(), mb.dtype, mb.shape));
      return to_numpy(t, true);
    }
    if (mb.kind == field_kind::text || mb.kind == field_kind::json) {
      unwrap(validate_utf8(mb.data));
      return nb::str(reinterpret_cast<const char*>(mb.data.data()), mb.data.size());
    }
    return bytes_array(mb.data, keep);
  };
  nb::class_<py_wds>(m, "WebDatasetReader", "A WebDataset tar shard as samples grouped by key (members typed by extension).")
      .def_static("open",
                  [](const std::string& path, const std::optional<decode_limits>& limits) {
                    nb::gil_scoped_release nogil;
                    return py_wds{unwrap(webdataset_reader::open(path, limits_or_default(limits)))};
                  },
                  nb::arg("path"), nb::arg("limits") = nb::none())
      .def_static("parse",
                  [](nb::handle data, const std::optional<decode_limits>& limits) {
                    auto buf = get_buffer(data);
                    return py_wds{unwrap(webdataset_reader::parse(buf->bytes(), limits_or_default(limits), std::shared_ptr<const void>(buf)))};
                  },
                  nb::arg("data"), nb::arg("limits") = nb::none())
      .def("__len__", [](const py_wds& s) { return s.r.size(); })
      .def("__getitem__",
           [member_value](const py_wds& s, std::int64_t i) {
             if (i < 0) i += static_cast<std::int64_t>(s.r.size());
             if (i < 0 || static_cast<std::size_t>(i) >= s.r.size()) throw nb::index_error();
             const wds_sample& smp = s.r[static_cast<std::size_t>(i)];
             nb::dict d;
             d["__key__"] = smp.key;
             for (const auto& mb : smp.members) d[nb::str(mb.name.c_str())] = member_value(mb, s.r.keep_alive());
             return d;
           },
           "Sample i as {'__key__': key, ext: value}: .npy -> array (zero copy), txt/json -> str, others -> "
           "read-only uint8 array of the member's bytes (zero copy).")
      .def("members",
           [](const py_wds& s, std::size_t i) {
             if (i >= s.r.size()) throw nb::index_error();
             nb::list l;
             for (const auto& mb : s.r[i].members)
               l.append(nb::make_tuple(mb.name, mb.path, std::string(to_string(mb.kind)), std::string(codec::to_string(mb.codec)),
                                       std::string(to_string(mb.dtype)), shape_tuple(mb.shape)));
             return l;
           },
           "(name, path, kind, codec, dtype, shape) of each member of sample i.")
      .def("to_record",
           [](nb::handle self, std::size_t i) {
             const auto& s = nb::cast<const py_wds&>(self);
             if (i >= s.r.size()) throw nb::index_error();
             py_builder b;
             b.b = unwrap(s.r[i].to_record());
             b.owners.push_back(nb::borrow(self));  // the builder references the tar's bytes
             return b;
           },
           "Sample i as a RecordBuilder referencing the tar (nothing copied until it is written).");

  // ---- Dataset -------------------------------------------------------------------------------------------
  struct py_sample {
    sample s;
    decode_limits limits;
  };
  nb::class_<py_sample>(m, "Sample", "One sample of a Dataset: a stable id and its fields (sharing the dataset's bytes).")
      .def_prop_ro("id", [](const py_sample& s) { return s.s.id; })
      .def("keys", [](const py_sample& s) {
        std::vector<std::string> k;
        for (const auto& f : s.s.fields) k.push_back(f.name);
        return k;
      })
      .def_prop_ro("record", [](const py_sample& s) -> std::optional<py_record> {
        if (!s.s.is_record()) return std::nullopt;
        return py_record{s.s.record};
      }, "The parsed record of shard / .jemr samples (None for tars and loose files).")
      .def("fields", [](const py_sample& s) {
        nb::list l;
        for (const auto& f : s.s.fields) {
          nb::dict d;
          d["name"] = f.name;
          d["kind"] = std::string(to_string(f.kind));
          d["codec"] = std::string(codec::to_string(f.codec));
          d["dtype"] = std::string(to_string(f.dtype));
          d["shape"] = shape_tuple(f.shape);
          d["decoded_size"] = f.decoded_size;
          d["bytes"] = bytes_array(f.bytes, f.keep_alive);
          l.append(d);
        }
        return l;
      }, "Each field's metadata and its stored bytes (read-only uint8 array, zero copy).")
      .def("to_dict",
           [member_value](const py_sample& s, bool verify) {
             if (s.s.is_record()) return record_to_dict(s.s.record, verify, s.limits);
             nb::dict d;
             for (const auto& f : s.s.fields) {
               if (f.kind == field_kind::text || f.kind == field_kind::json) {
                 auto t = unwrap(f.text(s.limits));
                 d[nb::str(f.name.c_str())] = nb::str(t.data(), t.size());
               } else if (f.kind == field_kind::tensor && f.codec == codec::codec_id::raw) {
                 d[nb::str(f.name.c_str())] = to_numpy(tensor::wrap(f.keep_alive, tensor_view(f.bytes.data(), f.dtype, f.shape)), true);
               } else {
                 d[nb::str(f.name.c_str())] = bytes_array(f.bytes, f.keep_alive);
               }
             }
             return d;
           },
           nb::arg("verify") = true, "{name: value} as RecordView.to_dict (tensors zero copy, text as str).")
      .def("to_record",
           [](nb::handle self) {
             const auto& s = nb::cast<const py_sample&>(self);
             py_builder b;
             b.b = unwrap(s.s.to_record());
             b.owners.push_back(nb::borrow(self));
             return b;
           },
           "A RecordBuilder of every field referencing this sample's bytes.");
  nb::class_<py_dataset>(m, "Dataset",
                         "One random-access sequence of samples over .jems shards, .jemr records, WebDataset tars and "
                         "directories of media files with captions.")
      .def_static("open",
                  [](nb::handle paths, bool skip_bad_sources, bool verify, const std::optional<decode_limits>& limits) {
                    std::vector<std::string> p;
                    if (nb::isinstance<nb::str>(paths)) p.push_back(nb::cast<std::string>(paths));
                    else for (auto h : paths) p.push_back(nb::cast<std::string>(nb::str(h)));
                    dataset_options o;
                    o.skip_bad_sources = skip_bad_sources;
                    o.payload_checks = verify ? checksum_policy::verify : checksum_policy::skip;
                    o.limits = limits_or_default(limits);
                    nb::gil_scoped_release nogil;
                    return py_dataset{unwrap(dataset::open(std::span<const std::string>(p), o))};
                  },
                  nb::arg("paths"), nb::arg("skip_bad_sources") = false, nb::arg("verify") = true, nb::arg("limits") = nb::none())
      .def("__len__", [](const py_dataset& d) { return d.d.size(); })
      .def("__getitem__", [](const py_dataset& d, std::int64_t i) {
        if (i < 0) i += static_cast<std::int64_t>(d.d.size());
        if (i < 0) raise(errc::not_found, "dataset: negative index");
        result<sample> s = fail(errc::internal, "");
        {
          nb::gil_scoped_release nogil;
          s = d.d.get(static_cast<std::size_t>(i));
        }
        return py_sample{unwrap(std::move(s)), d.d.options().limits};
      })
      .def("id", [](const py_dataset& d, std::size_t i) { return unwrap(d.d.id(i)); })
      .def("errors", [](const py_dataset& d) {
        nb::list l;
        for (const auto& e : d.d.errors()) l.append(nb::make_tuple(e.path, std::string(to_string(e.error.code)), e.error.message));
        return l;
      }, "(path, errc, message) of each source left out (skip_bad_sources).")
      .def_prop_ro("file_count", [](const py_dataset& d) { return d.d.file_count(); });
}

}  // namespace jitembed::python
