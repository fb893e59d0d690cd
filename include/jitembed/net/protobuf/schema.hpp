// .proto texts built into a DescriptorPool at run time (libprotoc's parser): message types without generated
// .pb.cc files, so the library stays header-only.
#pragma once

#include <google/protobuf/compiler/parser.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace jitembed::net::protobuf {

namespace detail {
// The parser's messages as "LINE:COLUMN: message" lines (1-based).
struct parse_errors final : google::protobuf::io::ErrorCollector {
  std::string text;
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    text += std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message + "\n";
  }
};
// The pool's messages (an unknown type, a name defined twice) as "ELEMENT: message" lines.
struct build_errors final : google::protobuf::DescriptorPool::ErrorCollector {
  std::string text;
  void AddError(const std::string&, const std::string& element_name, const google::protobuf::Message*, ErrorLocation,
                const std::string& message) override {
    text += element_name + ": " + message + "\n";
  }
};
}  // namespace detail

// Parses `proto` (a .proto text) and builds it into `pool` as `file_name`; returns the file's descriptor. The
// schemas are constants of the headers, so one that does not parse or build is a bug: std::logic_error.
inline const google::protobuf::FileDescriptor& build_schema(google::protobuf::DescriptorPool& pool,
                                                            std::string_view proto, const std::string& file_name,
                                                            std::string_view what) {
  detail::parse_errors errors;
  google::protobuf::io::ArrayInputStream in(proto.data(), static_cast<int>(proto.size()));
  google::protobuf::io::Tokenizer tokens(&in, &errors);
  google::protobuf::compiler::Parser parser;
  parser.RecordErrorsTo(&errors);
  google::protobuf::FileDescriptorProto file;
  if (!parser.Parse(&tokens, &file))
    throw std::logic_error("jitembed: the " + std::string(what) + " schema does not parse:\n" + errors.text);
  file.set_name(file_name);
  detail::build_errors build;
  const google::protobuf::FileDescriptor* fd = pool.BuildFileCollectingErrors(file, &build);
  if (!fd) throw std::logic_error("jitembed: the " + std::string(what) + " schema does not build:\n" + build.text);
  return *fd;
}

// The messages of .proto files built in order (a file may import an earlier one by its name) as dynamic
// messages of package `package`. Thread-safe once built.
class dynamic_schema {
 public:
  using file = std::pair<std::string, std::string_view>;  // {name, text}
  dynamic_schema(std::string package, std::initializer_list<file> files, std::string_view what)
      : package_(std::move(package) + ".") {
    for (const auto& [name, text] : files) build_schema(pool_, text, name, what);
    factory_.SetDelegateToGeneratedFactory(false);
  }
  dynamic_schema(const dynamic_schema&) = delete;
  dynamic_schema& operator=(const dynamic_schema&) = delete;

  // The prototype of "<package>.<name>" (nested: "ModelInferRequest.InferInputTensor"); throws
  // std::logic_error for a name the schema lacks (a bug in the caller, not bad input).
  const google::protobuf::Message& prototype(std::string_view name) const {
    const auto* d = pool_.FindMessageTypeByName(package_ + std::string(name));
    if (!d) throw std::logic_error("jitembed: the schema has no message '" + package_ + std::string(name) + "'");
    return *factory_.GetPrototype(d);
  }
  // A new empty message of that type.
  std::unique_ptr<google::protobuf::Message> make(std::string_view name) const {
    return std::unique_ptr<google::protobuf::Message>(prototype(name).New());
  }
  const google::protobuf::DescriptorPool& pool() const noexcept { return pool_; }

 private:
  std::string package_;
  google::protobuf::DescriptorPool pool_;
  mutable google::protobuf::DynamicMessageFactory factory_{&pool_};
};

}  // namespace jitembed::net::protobuf
