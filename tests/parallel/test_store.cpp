// Rendezvous stores: values round-trip, get() waits for a later set(), missing keys time out.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "jitembed/parallel/store.hpp"

using namespace jitembed;
using namespace jitembed::parallel;

namespace {
std::string as_string(const std::vector<std::byte>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size()); }

void exercise(store& s) {
  s.set("a/b", std::string_view("hello")).value();
  CHECK(as_string(s.get("a/b", std::chrono::milliseconds(10)).value()) == "hello");
  CHECK(s.check("a/b").value());
  CHECK_FALSE(s.check("missing").value());
  auto missing = s.get("missing", std::chrono::milliseconds(50));
  CHECK(missing.code() == errc::timeout);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.set("late", std::string_view("x")).value();
  });
  CHECK(as_string(s.get("late", std::chrono::seconds(5)).value()) == "x");
  later.join();
  s.set("a/b", std::string_view("")).value();  // overwrite with an empty value
  CHECK(s.get("a/b", std::chrono::milliseconds(10)).value().empty());
}
}  // namespace

TEST_CASE("hash_store and file_store: set/get/check/timeout") {
  hash_store h;
  exercise(h);
  const auto dir = std::filesystem::temp_directory_path() / ("jitembed_store_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto f = file_store::open(dir).value();
    exercise(f);
    // Keys with '/' stay inside the folder.
    std::size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
    CHECK(files == 2);
  }
  auto base = std::make_shared<hash_store>();
  prefix_store p(base, "group1/");
  p.set("k", std::string_view("v")).value();
  CHECK(base->check("group1/k").value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("file_store::open reports a folder it cannot create in the result") {
  const auto base = std::filesystem::temp_directory_path() / ("jitembed_store_bad_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  const auto plain = base / "plain_file";
  std::ofstream(plain) << "x";
  // A folder below a regular file cannot be created: io_error (the constructor used to throw it).
  auto under_file = file_store::open(plain / "rdzv");
  REQUIRE_FALSE(under_file);
  CHECK(under_file.code() == errc::io_error);
  CHECK(under_file.error().message.find("file_store: cannot create") != std::string::npos);
  // The path names a regular file: not a folder.
  auto is_file = file_store::open(plain);
  REQUIRE_FALSE(is_file);
  CHECK(is_file.code() == errc::io_error);
  CHECK(file_store::open("").code() == errc::invalid_argument);
  CHECK(file_store::open(base / "ok", std::chrono::milliseconds(-1)).code() == errc::invalid_argument);
  // A store is a movable value; a moved one keeps its folder.
  auto ok = file_store::open(base / "ok").value();
  file_store moved = std::move(ok);
  CHECK(moved.dir() == base / "ok");
  moved.set("k", std::string_view("v")).value();
  CHECK(moved.check("k").value());
  std::filesystem::remove_all(base);
}
