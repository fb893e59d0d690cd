// Rendezvous stores: values round-trip, get() waits for a later set(), missing keys time out.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <memory>
#include <span>
#include <thread>
#include <type_traits>

#include "jitembed/parallel/store.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::as_string;

namespace {

template <rendezvous_store S>
void exercise(S& s) {
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
// A store that models rendezvous_store without deriving from `store`: shared_store adapts it.
struct counting_store {
  hash_store inner;
  std::shared_ptr<int> sets = std::make_shared<int>(0);
  result<void> set(std::string_view key, std::span<const std::byte> value) {
    ++*sets;
    return inner.set(key, value);
  }
  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) {
    return inner.get(key, timeout);
  }
  result<bool> check(std::string_view key) { return inner.check(key); }
};
}  // namespace

TEST_CASE("shared_store: copies share one store, empty handles fail, any rendezvous_store fits") {
  static_assert(std::is_nothrow_move_constructible_v<shared_store> && std::is_copy_constructible_v<shared_store>);
  shared_store a(hash_store{});
  exercise(a);
  shared_store b = a;  // a copy refers to the same table
  b.set("shared", std::string_view("yes")).value();
  CHECK(as_string(a.get("shared", std::chrono::milliseconds(10)).value()) == "yes");
  CHECK(a.target<hash_store>() != nullptr);
  CHECK(a.target<hash_store>() == b.target<hash_store>());
  CHECK(a.target<file_store>() == nullptr);
  // Moving the original leaves the copy working (the table lives behind the handle).
  shared_store moved = std::move(a);
  CHECK(b.check("shared").value());
  CHECK(moved.check("shared").value());

  shared_store in_place(std::in_place_type<hash_store>);
  CHECK_FALSE(in_place.check("shared").value());  // its own table

  shared_store adapted(counting_store{});
  exercise(adapted);
  REQUIRE(adapted.target<counting_store>() != nullptr);
  CHECK(*adapted.target<counting_store>()->sets == 3);

  shared_store empty;
  CHECK_FALSE(empty);
  CHECK(empty.set("k", std::string_view("v")).code() == errc::invalid_argument);
  CHECK(empty.get("k", std::chrono::milliseconds(1)).code() == errc::invalid_argument);
  CHECK(empty.check("k").code() == errc::invalid_argument);
}

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
  shared_store base(hash_store{});
  prefix_store p(base, "group1/");
  p.set("k", std::string_view("v")).value();
  CHECK(base.check("group1/k").value());
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
