// net/protobuf/schema.hpp: a .proto text built into a pool (messages usable as dynamic messages), and the
// messages a broken schema throws with (a bug in the schema's header: std::logic_error naming it).
#include <google/protobuf/dynamic_message.h>

#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "jitembed/net/protobuf/schema.hpp"

namespace pb = google::protobuf;
using jitembed::net::protobuf::build_schema;

TEST_CASE("build_schema: a .proto text becomes message types of the pool") {
  pb::DescriptorPool pool;
  const pb::FileDescriptor& fd = build_schema(pool, R"(syntax = "proto3";
package t;
message Pair { string key = 1; repeated int64 values = 2; }
)",
                                              "t/pair.proto", "test");
  CHECK(fd.name() == "t/pair.proto");
  const pb::Descriptor* d = pool.FindMessageTypeByName("t.Pair");
  REQUIRE(d != nullptr);
  CHECK(d == fd.FindMessageTypeByName("Pair"));
  pb::DynamicMessageFactory factory(&pool);
  std::unique_ptr<pb::Message> m(factory.GetPrototype(d)->New());
  m->GetReflection()->SetString(m.get(), d->FindFieldByName("key"), "k");
  m->GetReflection()->AddInt64(m.get(), d->FindFieldByName("values"), 7);
  std::string wire;
  REQUIRE(m->SerializeToString(&wire));
  std::unique_ptr<pb::Message> back(factory.GetPrototype(d)->New());
  REQUIRE(back->ParseFromString(wire));
  CHECK(back->GetReflection()->GetString(*back, d->FindFieldByName("key")) == "k");
}

TEST_CASE("build_schema: a schema that does not parse or build is a logic_error naming it") {
  pb::DescriptorPool pool;
  try {
    build_schema(pool, "syntax = \"proto3\";\nmessage A { int32 x = ; }\n", "bad.proto", "broken");
    FAIL("no throw");
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    CHECK(what.find("jitembed: the broken schema does not parse:") == 0);
    CHECK(what.find("\n2:") != std::string::npos);  // line:column of the parser's message, 1-based
  }
  CHECK_THROWS_WITH_AS(build_schema(pool, "syntax = \"proto3\"; message B { strin x = 1; }", "b.proto", "typo"),
                       "jitembed: the typo schema does not build:\nB.x: \"strin\" is not defined.\n", std::logic_error);
  build_schema(pool, "syntax = \"proto3\"; message A { int32 x = 1; }", "a.proto", "first");
  CHECK_THROWS_WITH_AS(
      build_schema(pool, "syntax = \"proto3\"; message A { int32 y = 1; }", "a2.proto", "second"),
      "jitembed: the second schema does not build:\nA: \"A\" is already defined in file \"a.proto\".\n",
      std::logic_error);
}
