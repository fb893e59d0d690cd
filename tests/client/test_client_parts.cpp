// The client's parts that do no I/O, alone: the endpoint set (drain, ejection, circuit breaker, eligibility),
// the balancer and the failed-answer policy, the hedger, the call table (rows, deadlines, coalescing,
// waiting calls).
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "jitembed/client/detail/call_table.hpp"
#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/detail/endpoint_set.hpp"
#include "jitembed/client/detail/hedger.hpp"

namespace cl = jitembed::client;
namespace cd = jitembed::client::detail;
using namespace std::chrono_literals;
using jitembed::errc;

namespace {

std::vector<cl::endpoint_address> addresses(std::initializer_list<const char*> urls) {
  std::vector<cl::endpoint_address> out;
  for (const char* u : urls) out.push_back(cl::parse_endpoint_url(u).value());
  return out;
}

auto make_reachable = [](const cl::endpoint_address& a) {
  auto e = std::make_shared<cd::endpoint_state>();
  e->addr = a;
  e->reachable = true;
  return e;
};

std::vector<std::string> urls_of(const cd::endpoint_set& s) {
  std::vector<std::string> out;
  for (const auto& a : s.snapshot()->live) out.push_back(a.url);
  return out;
}

}  // namespace

TEST_CASE("endpoint set: the picker is an immutable snapshot, a new one published on each change") {
  cd::endpoint_set s(cl::breaker_options{}, 0.2);
  const auto empty = s.snapshot();
  REQUIRE(empty);
  CHECK(empty->endpoints.empty());
  s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable);
  const auto two = s.snapshot();
  CHECK(two != empty);
  CHECK(empty->endpoints.empty());  // a reader holding the old one keeps it as it was
  CHECK(two->endpoints.size() == 2);
  CHECK(two->live.size() == 2);
  s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable);
  CHECK(s.snapshot() == two);  // no change, no new picker

  cd::endpoint_state& second = *s.all()[1];
  CHECK_FALSE(s.on_attempt(second, cd::clock::now()));
  s.apply(addresses({"http://127.0.0.1:1"}), make_reachable);  // :2 drains: still a member, no longer live
  const auto draining = s.snapshot();
  CHECK(draining->endpoints.size() == 2);
  REQUIRE(draining->live.size() == 1);
  CHECK(draining->live[0].url == "http://127.0.0.1:1");
  CHECK(two->live.size() == 2);
  CHECK(s.unknown(addresses({"http://127.0.0.1:2", "http://127.0.0.1:3"})).size() == 1);
  s.on_attempt_end(second, false);
  REQUIRE(s.reap().size() == 1);
  CHECK(s.snapshot()->endpoints.size() == 1);  // reaped: gone from the picker
  CHECK(draining->endpoints.size() == 2);
}

TEST_CASE("endpoint set: endpoints join, removed ones drain until their attempts end, re-added ones come back") {
  cd::endpoint_set s(cl::breaker_options{}, 0.2);
  auto ch = s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable);
  CHECK(ch.changed);
  CHECK(ch.added.size() == 2);
  CHECK(s.unknown(addresses({"http://127.0.0.1:2", "grpc://127.0.0.1:3"})).size() == 1);
  CHECK_FALSE(s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable).changed);

  cd::endpoint_state& second = *s.all()[1];
  const auto now = cd::clock::now();
  CHECK_FALSE(s.on_attempt(second, now));  // an attempt in flight on :2
  ch = s.apply(addresses({"http://127.0.0.1:1"}), make_reachable);
  REQUIRE(ch.drained.size() == 1);
  CHECK(ch.drained[0]->addr.url == "http://127.0.0.1:2");
  CHECK(urls_of(s) == std::vector<std::string>{"http://127.0.0.1:1"});
  CHECK_FALSE(s.eligible(second, "m", now));
  CHECK(s.reap().empty());  // its attempt has not ended
  CHECK(s.all().size() == 2);

  ch = s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable);  // back before it drained
  CHECK(ch.changed);
  CHECK(ch.added.empty());
  CHECK(s.eligible(second, "m", now));

  s.apply(addresses({"http://127.0.0.1:1"}), make_reachable);
  s.on_attempt_end(second, false);
  const auto gone = s.reap();
  REQUIRE(gone.size() == 1);
  CHECK(gone[0]->addr.url == "http://127.0.0.1:2");
  std::vector<cl::endpoint_stats> st;
  s.report(st, now);
  REQUIRE(st.size() == 2);  // the live one and the retired one's counters
  CHECK(st[1].url == "http://127.0.0.1:2");
  CHECK(st[1].draining);
  CHECK(st[1].requests == 1);
}

TEST_CASE(
    "endpoint set: the circuit opens after the threshold, half-open lets one probe through, TLS opens it at once") {
  cl::breaker_options b;
  b.failure_threshold = 3;
  b.open_for = 100ms;
  cd::endpoint_set s(b, 0.5);
  s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable);
  auto& e = *s.all()[0];
  auto t = cd::clock::now();
  CHECK_FALSE(s.note_failure(e, t));
  CHECK_FALSE(s.note_failure(e, t));
  CHECK(s.note_failure(e, t));  // the third consecutive failure
  CHECK(e.failures == 3);
  CHECK_FALSE(s.eligible(e, "m", t + 50ms));
  CHECK(s.candidates("m", {}, t + 50ms).size() == 1);

  const auto later = t + 150ms;  // half-open: one probe
  CHECK(s.eligible(e, "m", later));
  CHECK(s.on_attempt(e, later));
  CHECK_FALSE(s.eligible(e, "m", later));  // while the probe is in flight
  s.on_attempt_end(e, true);
  CHECK(s.note_failure(e, later));  // a failed probe opens it again at once
  CHECK_FALSE(s.eligible(e, "m", later + 50ms));

  s.note_success(e, 10.0);  // an answer closes it
  CHECK(s.eligible(e, "m", later + 50ms));
  CHECK(e.consecutive_failures == 0);
  s.note_success(e, 20.0);
  CHECK(e.ewma_ms == doctest::Approx(15.0));

  auto& other = *s.all()[1];
  CHECK(s.note_fatal(other, t));  // TLS: no threshold
  CHECK_FALSE(s.eligible(other, "m", t));

  s.note_failure(e, t);
  s.note_alive(e, false);  // a 4xx: alive, the count restarts
  CHECK(e.consecutive_failures == 0);
}

TEST_CASE("endpoint set: a model ejected from an endpoint is probed after eject_for and re-admitted when ready") {
  cl::breaker_options b;
  b.eject_for = 200ms;
  cd::endpoint_set s(b, 0.2);
  s.apply(addresses({"http://127.0.0.1:1", "http://127.0.0.1:2"}), make_reachable);
  auto& e = *s.all()[0];
  const auto t = cd::clock::now();
  s.eject(e, "vae", t);
  CHECK_FALSE(s.eligible(e, "vae", t));
  CHECK(s.eligible(e, "clip", t));  // only for that model
  CHECK(s.due_probes(t + 100ms).empty());
  const auto due = s.due_probes(t + 300ms);
  REQUIRE(due.size() == 1);
  CHECK(due[0].second == "vae");
  CHECK_FALSE(s.probed(e, "vae", false, t + 300ms));  // not ready: ejected again
  CHECK(s.due_probes(t + 400ms).empty());
  CHECK(s.probed(e, "vae", true, t + 600ms));
  CHECK(s.eligible(e, "vae", t + 600ms));
  // ejected everywhere (draining endpoints aside) only when every endpoint ejected it
  CHECK_FALSE(s.ejected_everywhere("vae"));
  s.eject(*s.all()[0], "vae", t);
  CHECK_FALSE(s.ejected_everywhere("vae"));
  s.eject(*s.all()[1], "vae", t);
  CHECK(s.ejected_everywhere("vae"));
  CHECK_FALSE(s.ejected_everywhere("clip"));
  CHECK(s.probed(*s.all()[1], "vae", true, t + 600ms));

  // an unreachable endpoint (a name that did not resolve) is never eligible
  s.all()[1]->reachable = false;
  CHECK(s.candidates("clip", {}, t).size() == 1);
  // tried endpoints are avoided while another is eligible
  s.all()[1]->reachable = true;
  std::set<const cd::endpoint_state*> tried{&e};
  const auto c = s.candidates("clip", tried, t);
  REQUIRE(c.size() == 1);
  CHECK(c[0] == s.all()[1].get());
  tried.insert(s.all()[1].get());
  CHECK(s.candidates("clip", tried, t).size() == 2);  // all tried: any of them
}

TEST_CASE("balancer: fewer attempts in flight wins, a tie goes to the clearly faster one, equals share") {
  std::mt19937_64 rng(7);
  cd::endpoint_state a, b;
  a.outstanding = 3;
  b.outstanding = 1;
  std::vector<cd::endpoint_state*> pool{&a, &b};
  for (int i = 0; i < 50; ++i) CHECK(cd::power_of_two(pool, rng) == &b);
  a.outstanding = b.outstanding = 2;
  a.has_ewma = b.has_ewma = true;
  const auto now = cd::clock::now();
  a.ewma_at = b.ewma_at = now;
  a.ewma_ms = 100;
  b.ewma_ms = 10;
  for (int i = 0; i < 50; ++i) CHECK(cd::power_of_two(pool, rng, now) == &b);
  b.ewma_ms = 90;  // within 20%: either
  std::map<cd::endpoint_state*, int> n;
  for (int i = 0; i < 400; ++i) ++n[cd::power_of_two(pool, rng, now)];
  CHECK(n[&a] > 100);
  CHECK(n[&b] > 100);
  // A slow sample ages: 4 s later the slow one (not picked since) is 16x cheaper and gets picked again.
  const auto later = now + std::chrono::seconds(4);
  b.ewma_ms = 10;
  b.ewma_at = later;
  CHECK(cd::aged_latency_ms(a, later) == doctest::Approx(6.25));
  for (int i = 0; i < 50; ++i) CHECK(cd::power_of_two(pool, rng, later) == &a);
  CHECK(cd::power_of_two(std::vector<cd::endpoint_state*>{}, rng) == nullptr);
  CHECK(cd::power_of_two(std::vector<cd::endpoint_state*>{&a}, rng) == &a);
}

TEST_CASE("policy: what each fault of an attempt's outcome leads to") {
  using cd::answer_action;
  using f = cd::attempt_fault;
  // not_found ejects the endpoint for the model, whoever's fault it was
  CHECK(cd::after_failed_answer(f::request, errc::not_found, 4) == answer_action::eject);
  CHECK(cd::after_failed_answer(f::endpoint, errc::not_found, 1) == answer_action::eject);
  CHECK(cd::after_failed_answer(f::busy, errc::not_found, 1) == answer_action::eject);
  // busy: retried, whatever the errc
  CHECK(cd::after_failed_answer(f::busy, errc::unavailable, 4) == answer_action::retry);
  CHECK(cd::after_failed_answer(f::busy, errc::resource_exhausted, 1) == answer_action::retry);
  CHECK(cd::after_failed_answer(f::busy, errc::timeout, 1) == answer_action::retry);
  CHECK(cd::after_failed_answer(f::busy, errc::internal, 4) == answer_action::retry);
  // the request's: each row alone when there are several, else given up
  CHECK(cd::after_failed_answer(f::request, errc::invalid_argument, 4) == answer_action::split_rows);
  CHECK(cd::after_failed_answer(f::request, errc::invalid_argument, 1) == answer_action::fail);
  CHECK(cd::after_failed_answer(f::request, errc::cancelled, 1) == answer_action::fail);
  // the endpoint's: retried when the service is in trouble, else given up (never split)
  CHECK(cd::after_failed_answer(f::endpoint, errc::unavailable, 4) == answer_action::retry);
  CHECK(cd::after_failed_answer(f::endpoint, errc::timeout, 1) == answer_action::retry);
  CHECK(cd::after_failed_answer(f::endpoint, errc::internal, 4) == answer_action::fail);
  CHECK(cd::after_failed_answer(f::endpoint, errc::io_error, 1) == answer_action::fail);
}

TEST_CASE("hedger: armed after min_samples, the delay is the percentile and never below min_delay") {
  cl::hedge_options o;
  o.min_samples = 64;
  o.percentile = 0.5;
  o.min_delay = 5ms;
  cd::hedger h(o);
  for (int i = 0; i < 63; ++i) h.add(100.0);
  CHECK_FALSE(h.armed());
  h.add(100.0);
  CHECK(h.armed());
  CHECK(h.delay() == std::chrono::duration_cast<cd::clock::duration>(100ms));
  for (int i = 0; i < 2048; ++i) h.add(1.0);
  CHECK(h.delay() == std::chrono::duration_cast<cd::clock::duration>(5ms));  // the floor
  CHECK(h.percentile(0.99) == doctest::Approx(1.0));
  CHECK(cd::hedger::worth_it(3, 2));
  CHECK_FALSE(cd::hedger::worth_it(2, 2));
  o.enabled = false;
  cd::hedger off(o);
  for (int i = 0; i < 100; ++i) off.add(1.0);
  CHECK_FALSE(off.armed());
}

TEST_CASE("call table: rows encoded once, deadlines, coalescing while unfinished, waiting calls") {
  cd::call_table t;
  const std::string r0 = "first row", r1 = "", r2 = "third";
  cl::embed_request req;
  req.model = "m";
  req.rows = {jitembed::as_bytes_view(r0), jitembed::as_bytes_view(r1), jitembed::as_bytes_view(r2)};
  req.coalesce_key = jitembed::hash128{1, 2};
  const auto id = t.next_id();
  CHECK(t.next_id() == id + 1);
  auto made = cd::call_table::make(id, req, std::chrono::duration_cast<cd::clock::duration>(5s));
  REQUIRE(made);
  const cd::call_ptr c = *made;
  CHECK(c->n_rows == 3);
  CHECK(std::string(reinterpret_cast<const char*>(c->row(0).data()), c->row(0).size()) == r0);
  CHECK(c->row(1).empty());
  CHECK(std::string(reinterpret_cast<const char*>(c->row(2).data()), c->row(2).size()) == r2);
  CHECK(c->deadline - c->start == std::chrono::duration_cast<cd::clock::duration>(5s));
  req.timeout = 250ms;
  const cd::call_ptr timed = *cd::call_table::make(id, req, std::chrono::duration_cast<cd::clock::duration>(5s));
  CHECK(timed->deadline - timed->start == std::chrono::duration_cast<cd::clock::duration>(250ms));

  const auto row = cd::call_table::make_row(*c, 2);
  CHECK(row->internal);
  CHECK(row->n_rows == 1);
  CHECK(row->deadline == c->deadline);
  CHECK(std::string(reinterpret_cast<const char*>(row->row(0).data()), row->row(0).size()) == r2);

  t.add(c);
  CHECK(t.size() == 1);
  CHECK(t.find(id) == c);
  CHECK(t.joinable(*req.coalesce_key) == c);
  c->done = true;
  CHECK(t.joinable(*req.coalesce_key) == nullptr);  // a finished call is not joined
  t.remove(*c);
  CHECK(t.size() == 0);
  CHECK(t.find(id) == nullptr);

  t.wait(c);
  t.wait(row);
  CHECK(t.take_waiting().size() == 2);
  CHECK(t.take_waiting().empty());

  c->attempts = 2;
  c->last_error = jitembed::fail(errc::unavailable, "busy");
  const auto e = cd::call_table::deadline_error(*c);
  CHECK(e.code == errc::timeout);
  CHECK(e.message.find("2 attempt(s)") != std::string::npos);
  CHECK(e.message.find("last: busy") != std::string::npos);
}
