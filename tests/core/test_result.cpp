// result<T> with std::expected's interface, the propagation macros, error_info's context and caller_action.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"

using namespace jitembed;

namespace {

result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return fail(errc::invalid_argument, std::string("not a digit: ") + c);
  return c - '0';
}

result<std::unique_ptr<int>> boxed(int v) {
  if (v < 0) return fail(errc::invalid_argument, "negative");
  return std::make_unique<int>(v);
}

result<std::pair<int, int>> two_digits(const char* s) {
  JITEMBED_ASSIGN_OR_RETURN(auto a, parse_digit(s[0]));
  JITEMBED_ASSIGN_OR_RETURN(auto b, parse_digit(s[1]));  // a second temporary in the same scope
  return std::pair<int, int>{a, b};
}

// The macro in a function returning result<U> of another U, with an existing variable and a structured
// binding (parenthesized because of its comma).
result<std::string> sum_as_text(const char* s) {
  int total = 0;
  JITEMBED_ASSIGN_OR_RETURN((auto [a, b]), two_digits(s));
  JITEMBED_ASSIGN_OR_RETURN(total, parse_digit(s[2]));
  return std::to_string(a + b + total);
}

// The macros in a function returning result<void>.
int g_sum = 0;
result<void> add_digit(char c) {
  JITEMBED_ASSIGN_OR_RETURN(const int d, parse_digit(c));
  g_sum += d;
  return {};
}
result<void> add_all(const char* s) {
  for (; *s != '\0'; ++s) JITEMBED_TRY(add_digit(*s));
  JITEMBED_TRY(parse_digit('0'));  // a discarded value
  return {};
}

result<int> unbox(int v) {
  JITEMBED_ASSIGN_OR_RETURN(std::unique_ptr<int> p, boxed(v));  // move-only T moves through the macro
  return *p;
}

}  // namespace

TEST_CASE("result<T>: has_value, value, operator*, ->, error, code") {
  result<std::string> ok = std::string("abc");
  CHECK(ok.has_value());
  CHECK(static_cast<bool>(ok));
  CHECK(ok.value() == "abc");
  CHECK(*ok == "abc");
  CHECK(ok->size() == 3);
  CHECK(ok.code() == errc::ok);

  result<std::string> bad = fail(errc::not_found, "no field 'x'");
  CHECK_FALSE(bad.has_value());
  CHECK(bad.code() == errc::not_found);
  CHECK(bad.error().message == "no field 'x'");
  try {
    (void)bad.value();
    FAIL("value() on a failure must throw");
  } catch (const error& e) {
    CHECK(e.code() == errc::not_found);
    CHECK(e.message() == "no field 'x'");
    CHECK(std::string(e.what()) == "not_found: no field 'x'");
  }
  CHECK_THROWS_AS((void)std::move(bad).value(), error);

  // Value categories of the accessors, as std::expected's.
  static_assert(std::is_same_v<decltype(*ok), std::string&>);
  static_assert(std::is_same_v<decltype(*std::as_const(ok)), const std::string&>);
  static_assert(std::is_same_v<decltype(*std::move(ok)), std::string&&>);
  static_assert(std::is_same_v<decltype(std::move(ok).value()), std::string&&>);
  static_assert(std::is_same_v<decltype(std::move(std::as_const(ok)).value()), const std::string&&>);
  static_assert(std::is_same_v<decltype(bad.error()), error_info&>);
  static_assert(std::is_same_v<decltype(std::move(bad).error()), error_info&&>);
  static_assert(std::is_same_v<decltype(std::as_const(bad).error()), const error_info&>);
  static_assert(std::is_same_v<result<int>::value_type, int>);
  static_assert(std::is_same_v<result<int>::error_type, error_info>);
  static_assert(std::is_same_v<result<int>::rebind<long>, result<long>>);

  // Moving the value out leaves the result engaged (like std::expected): the string is moved-from.
  std::string taken = *std::move(ok);
  CHECK(taken == "abc");
  CHECK(ok.has_value());
}

TEST_CASE("result<T>: value_or") {
  CHECK(parse_digit('7').value_or(-1) == 7);
  CHECK(parse_digit('x').value_or(-1) == -1);
  const result<std::string> c = fail(errc::timeout, "t");
  CHECK(c.value_or("fallback") == "fallback");  // a U convertible to T
  // && overload with a move-only T: the value moves out.
  std::unique_ptr<int> p = boxed(4).value_or(nullptr);
  REQUIRE(p != nullptr);
  CHECK(*p == 4);
  CHECK(boxed(-1).value_or(nullptr) == nullptr);
}

TEST_CASE("result<T>: and_then") {
  auto twice = [](int v) -> result<int> {
    if (v > 4) return fail(errc::limit_exceeded, "too big");
    return 2 * v;
  };
  CHECK(parse_digit('3').and_then(twice).value() == 6);
  auto big = parse_digit('9').and_then(twice);
  CHECK(big.code() == errc::limit_exceeded);
  auto first = parse_digit('x').and_then([](int) -> result<int> {
    FAIL("not called on a failure");
    return 0;
  });
  CHECK(first.code() == errc::invalid_argument);
  CHECK(first.error().message == "not a digit: x");

  // A change of type, and the argument's value category follows the result's.
  result<std::string> s = parse_digit('5').and_then([](int v) -> result<std::string> { return std::to_string(v); });
  CHECK(*s == "5");
  result<int> from_lvalue = s.and_then([](std::string& v) -> result<int> { return static_cast<int>(v.size()); });
  CHECK(*from_lvalue == 1);
  const result<std::string> cs = std::string("xy");
  CHECK(cs.and_then([](const std::string& v) -> result<int> { return static_cast<int>(v.size()); }).value() == 2);
  // && with a move-only T: the callable receives an rvalue.
  auto moved = boxed(8).and_then([](std::unique_ptr<int>&& p) -> result<std::unique_ptr<int>> {
    *p += 1;
    return std::move(p);
  });
  CHECK(**moved == 9);
  // and_then to result<void>.
  result<void> v = parse_digit('1').and_then([](int) -> result<void> { return {}; });
  CHECK(v.has_value());
}

TEST_CASE("result<T>: transform") {
  result<double> half = parse_digit('5').transform([](int v) { return v / 2.0; });
  CHECK(*half == doctest::Approx(2.5));
  result<double> none = parse_digit('?').transform([](int v) { return v / 2.0; });
  CHECK(none.code() == errc::invalid_argument);
  // A void callable gives result<void>.
  int seen = 0;
  result<void> done = parse_digit('4').transform([&](int v) { seen = v; });
  static_assert(std::is_same_v<decltype(done), result<void>>);
  CHECK(done.has_value());
  CHECK(seen == 4);
  // && with a move-only T.
  result<int> raw = boxed(6).transform([](std::unique_ptr<int>&& p) { return *p * 10; });
  CHECK(*raw == 60);
  CHECK(boxed(-6).transform([](std::unique_ptr<int>&& p) { return *p; }).code() == errc::invalid_argument);
}

TEST_CASE("result<T>: or_else and transform_error") {
  auto recover = [](const error_info& e) -> result<int> {
    if (e.code == errc::invalid_argument) return 0;
    return e;
  };
  CHECK(parse_digit('x').or_else(recover).value() == 0);
  CHECK(parse_digit('2').or_else([](const error_info&) -> result<int> {
                          FAIL("not called on a success");
                          return -1;
                        }).value() == 2);
  result<int> still = result<int>(fail(errc::timeout, "slow")).or_else(recover);
  CHECK(still.code() == errc::timeout);
  // && hands the error over by rvalue; a move-only T passes through.
  auto kept = boxed(3).or_else([](error_info&&) -> result<std::unique_ptr<int>> { return nullptr; });
  CHECK(**kept == 3);
  auto replaced = boxed(-3).or_else([](error_info&& e) -> result<std::unique_ptr<int>> {
    CHECK(e.message == "negative");
    return std::make_unique<int>(0);
  });
  CHECK(**replaced == 0);

  auto recoded = parse_digit('x').transform_error([](error_info e) {
    e.code = errc::corrupt_data;
    e.message = "digit: " + e.message;
    return e;
  });
  CHECK(recoded.code() == errc::corrupt_data);
  CHECK(recoded.error().message == "digit: not a digit: x");
  CHECK(parse_digit('1').transform_error([](error_info e) { return e; }).value() == 1);
}

TEST_CASE("result<void>: a real has-value bit and the same members") {
  result<void> ok;
  CHECK(ok.has_value());
  CHECK(ok.code() == errc::ok);
  CHECK_NOTHROW(ok.value());
  *ok;  // a no-op on a success, as std::expected<void>

  result<void> bad = fail(errc::io_error, "disk");
  CHECK_FALSE(bad.has_value());
  CHECK(bad.code() == errc::io_error);
  CHECK(bad.error().message == "disk");
  CHECK_THROWS_WITH_AS(bad.value(), "io_error: disk", error);
  // Copy and move keep the state.
  result<void> copy = bad;
  CHECK(copy.code() == errc::io_error);
  result<void> moved = std::move(copy);
  CHECK(moved.error().message == "disk");
  moved = result<void>();
  CHECK(moved.has_value());

  CHECK(ok.and_then([]() -> result<int> { return 5; }).value() == 5);
  CHECK(bad.and_then([]() -> result<int> { return 5; }).code() == errc::io_error);
  CHECK(ok.transform([] { return std::string("x"); }).value() == "x");
  CHECK(bad.transform([] { return 1; }).code() == errc::io_error);
  int calls = 0;
  CHECK(ok.transform([&] { ++calls; }).has_value());
  CHECK(calls == 1);
  CHECK(bad.or_else([](const error_info&) -> result<void> { return {}; }).has_value());
  CHECK(ok.or_else([](const error_info& e) -> result<void> { return e; }).has_value());
  CHECK(std::move(bad).or_else([](error_info&& e) -> result<void> { return std::move(e); }).code() == errc::io_error);
  auto recoded = result<void>(fail(errc::io_error, "x")).transform_error([](error_info e) {
    e.code = errc::unavailable;
    return e;
  });
  CHECK(recoded.code() == errc::unavailable);
}

TEST_CASE("JITEMBED_ASSIGN_OR_RETURN and JITEMBED_TRY") {
  auto p = two_digits("47");
  REQUIRE(p);
  CHECK(p->first == 4);
  CHECK(p->second == 7);
  CHECK(two_digits("4x").error().message == "not a digit: x");
  CHECK(two_digits("y7").error().message == "not a digit: y");

  CHECK(sum_as_text("123").value() == "6");
  CHECK(sum_as_text("12z").error().message == "not a digit: z");
  CHECK(sum_as_text("a23").code() == errc::invalid_argument);

  g_sum = 0;
  CHECK(add_all("123").has_value());
  CHECK(g_sum == 6);
  g_sum = 0;
  auto stopped = add_all("12-4");
  CHECK(stopped.code() == errc::invalid_argument);
  CHECK(stopped.error().message == "not a digit: -");
  CHECK(g_sum == 3);  // stopped at the first failure

  CHECK(unbox(5).value() == 5);
  CHECK(unbox(-5).code() == errc::invalid_argument);
}

TEST_CASE("error_info context: with_context on errors and results, rendered stably") {
  using namespace std::chrono_literals;
  error_info e = fail(errc::unavailable, "queue full")
                     .with_context(ctx::endpoint("127.0.0.1:8000"), ctx::retry_after(2s))
                     .with_context(ctx::note("model", "vae"), ctx::field("latent"), ctx::row(3));
  CHECK(e.context.endpoint == "127.0.0.1:8000");
  CHECK(e.context.field == "latent");
  CHECK(e.context.row == 3u);
  CHECK(e.context.retry_after == std::chrono::milliseconds(2000));
  REQUIRE(e.context.notes.size() == 1);
  CHECK(e.context.notes[0] == std::pair<std::string, std::string>("model", "vae"));
  // The typed slots in a fixed order, then the notes in the order added.
  CHECK(to_string(e.context) == "endpoint=127.0.0.1:8000, field=latent, row=3, retry_after=2000ms, model=vae");
  CHECK(to_string(e) ==
        "unavailable: queue full [endpoint=127.0.0.1:8000, field=latent, row=3, retry_after=2000ms, model=vae]");
  error ex(e);
  CHECK(std::string(ex.what()) == to_string(e));
  CHECK(ex.message() == "queue full");
  CHECK(ex.context() == e.context);
  CHECK(ex.info() == e);

  // No context: the rendering is the old "<errc>: <message>".
  CHECK(to_string(fail(errc::truncated, "short")) == "truncated: short");
  CHECK(to_string(error_context{}).empty());

  // A typed slot set twice keeps the last value; notes append.
  error_info twice = fail(errc::internal, "x");
  twice.with_context(ctx::row(1)).with_context(ctx::row(2), ctx::note("a", "1"), ctx::note("a", "2"));
  CHECK(twice.context.row == 2u);
  CHECK(to_string(twice.context) == "row=2, a=1, a=2");

  // On a result: a failure gets the context, a success is left alone.
  result<int> r = result<int>(fail(errc::decode_failed, "bad jpeg")).with_context(ctx::field("image"), ctx::row(7));
  CHECK(r.error().context.field == "image");
  CHECK(r.error().context.row == 7u);
  CHECK_THROWS_WITH_AS((void)r.value(), "decode_failed: bad jpeg [field=image, row=7]", error);
  result<int> fine = result<int>(1).with_context(ctx::row(7));
  CHECK(fine.value() == 1);
  result<void> v = result<void>(fail(errc::timeout, "t")).with_context(ctx::endpoint("h:1"));
  CHECK(v.error().context.endpoint == "h:1");
  result<void> lv = fail(errc::timeout, "t");
  lv.with_context(ctx::row(0));
  CHECK(lv.error().context.row == 0u);
  CHECK(result<void>().with_context(ctx::row(1)).has_value());

  // Context travels through the macros and through value()'s exception.
  auto annotated = []() -> result<int> {
    JITEMBED_ASSIGN_OR_RETURN(auto d, parse_digit('q').with_context(ctx::row(9)));
    return d;
  }();
  CHECK(annotated.error().context.row == 9u);
}

TEST_CASE("caller_action: the caller's move is a function of the errc (docs/api.md rule 1.5)") {
  // The table of docs/api.md, row by row.
  const std::map<errc, caller_move> table = {
      {errc::ok, caller_move::proceed},
      {errc::invalid_argument, caller_move::fix_input},
      {errc::buffer_too_small, caller_move::fix_input},
      {errc::truncated, caller_move::fix_input},
      {errc::bad_magic, caller_move::fix_input},
      {errc::unsupported_version, caller_move::fix_input},
      {errc::checksum_mismatch, caller_move::fix_input},
      {errc::corrupt_data, caller_move::fix_input},
      {errc::limit_exceeded, caller_move::fix_input},
      {errc::shape_overflow, caller_move::fix_input},
      {errc::unsupported_format, caller_move::fix_input},
      {errc::unsupported_codec, caller_move::fix_input},
      {errc::decode_failed, caller_move::fix_input},
      {errc::encode_failed, caller_move::report_bug},
      {errc::invalid_utf8, caller_move::fix_input},
      {errc::dtype_mismatch, caller_move::fix_input},
      {errc::io_error, caller_move::retry},
      {errc::not_found, caller_move::look_elsewhere},
      {errc::internal, caller_move::report_bug},
      {errc::comm_failed, caller_move::retry},
      {errc::timeout, caller_move::retry},
      {errc::unavailable, caller_move::retry},
      {errc::cancelled, caller_move::drop},
      {errc::resource_exhausted, caller_move::retry},
  };
  // Every code is in the table (codes are dense from 0; to_string knows each one).
  const auto last = static_cast<std::uint16_t>(errc::resource_exhausted);
  CHECK(table.size() == last + 1u);
  CHECK(to_string(static_cast<errc>(last + 1)) == "unknown");
  for (std::uint16_t i = 0; i <= last; ++i) {
    const auto e = static_cast<errc>(i);
    CAPTURE(to_string(e));
    REQUIRE(table.count(e) == 1);
    CHECK(caller_action(e) == table.at(e));
    CHECK(is_retryable(e) == (caller_action(e) == caller_move::retry));
    CHECK(to_string(caller_action(e)) != "unknown");
  }
  // A code from a newer peer is treated as a bug report, not retried.
  CHECK(caller_action(static_cast<errc>(last + 7)) == caller_move::report_bug);
  CHECK_FALSE(is_retryable(static_cast<errc>(last + 7)));
  CHECK(to_string(caller_move::look_elsewhere) == "look_elsewhere");
  static_assert(caller_action(errc::unavailable) == caller_move::retry);
  static_assert(!is_retryable(errc::not_found));
}
