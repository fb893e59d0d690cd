// Shared helpers for the kserve tests: golden files and tensor construction.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "jitembed/net/kserve.hpp"

namespace kserve_test {

inline std::string data_path(const std::string& name) { return std::string(JITEMBED_TEST_DATA_DIR) + "/" + name; }

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct golden {
  std::string body;
  std::optional<std::size_t> header_length;
};

inline golden load_request_golden(const std::string& name) {
  const auto manifest = nlohmann::json::parse(read_file(data_path("kserve_golden.json")));
  golden g;
  g.body = read_file(data_path("kserve_" + name + ".bin"));
  const auto& h = manifest.at(name).at("header_length");
  if (!h.is_null()) g.header_length = h.get<std::size_t>();
  return g;
}

inline std::string as_string(jitembed::bytes_view b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace kserve_test
