// Python-side holders of format objects, shared by the format, cache and client bindings.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::python {

struct py_dataset {
  format::dataset d;
};

struct py_record {
  format::record_view rec;
};

struct py_field {
  format::record_view rec;  // shares the record's state: the field stays valid
  std::size_t index = 0;
  const format::field_view& f() const;
  nb::object payload() const;
  nb::object decode(bool verify, const std::optional<decode_limits>& limits) const;
  std::string text(bool verify, const std::optional<decode_limits>& limits) const;
  nb::object value(bool verify, const decode_limits& limits) const;
};

// A record_builder plus what keeps the memory it references alive (Python buffers, arrays, records).
struct py_builder {
  format::record_builder b;
  std::vector<std::shared_ptr<py_buffer>> refs;
  std::vector<array_in> arrays;
  std::vector<format::record_view> records;
  std::vector<nb::object> owners;
  bytes_view keep(nb::handle o);
  nb::bytes finish() const;
};

nb::dict record_to_dict(const format::record_view& rec, bool verify, const decode_limits& lim);
py_record parse_record(nb::handle data, const std::optional<decode_limits>& limits);

}  // namespace jitembed::python
