// tiered_cache and any_store: lookup order, promotion, batched multi_get, write policies, and failing
// tiers (down or throwing) that never fail a call.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cache/cache_test_util.hpp"
#include "jitembed/cache/key.hpp"
#include "jitembed/cache/memory_cache.hpp"
#include "jitembed/cache/tiered_cache.hpp"
#include "jitembed/cache/value.hpp"

using namespace jitembed;
using namespace jitembed::cache;
using cache_test::key_n;

namespace {

std::string text_of(const cached_value& v) { return std::string(as_string_view(v.bytes)); }

// A map-backed store that can be switched to fail: `down` makes every call a counted failure (as a
// store whose server is unreachable behaves), `throws` makes every call throw.
class fault_store {
 public:
  bool down = false;
  bool throws = false;
  std::vector<std::size_t> batch_sizes;  // sizes of the multi_get batches seen

  std::optional<cached_value> get(const cache_key& k) {
    std::lock_guard lock(mu_);
    return get_locked(k);
  }
  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) {
    std::lock_guard lock(mu_);
    check_throw();
    batch_sizes.push_back(keys.size());
    std::vector<std::optional<cached_value>> out;
    for (const auto& k : keys) out.push_back(get_locked(k));
    return out;
  }
  bool put(const cache_key& k, bytes_view v) {
    std::lock_guard lock(mu_);
    check_throw();
    if (down) {
      counters_.errors++;
      return false;
    }
    auto buf = std::make_shared<std::string>(as_string_view(v));
    map_[k.to_hex()] = buf;
    counters_.puts++;
    return true;
  }
  bool contains(const cache_key& k) {
    std::lock_guard lock(mu_);
    check_throw();
    return !down && map_.count(k.to_hex());
  }
  bool erase(const cache_key& k) {
    std::lock_guard lock(mu_);
    check_throw();
    return !down && map_.erase(k.to_hex()) > 0;
  }
  cache_stats stats() const {
    cache_stats s = counters_.snapshot();
    std::lock_guard lock(mu_);
    s.entries = map_.size();
    return s;
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return map_.size();
  }

 private:
  void check_throw() const {
    if (throws) throw std::runtime_error("fault_store: thrown on purpose");
  }
  std::optional<cached_value> get_locked(const cache_key& k) {
    check_throw();
    if (down) {
      counters_.errors++;
      return std::nullopt;
    }
    auto it = map_.find(k.to_hex());
    if (it == map_.end()) {
      counters_.misses++;
      return std::nullopt;
    }
    counters_.hits++;
    const auto& s = it->second;
    return cached_value{as_bytes_view(*s), s};
  }

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::string>> map_;
  stats_counters counters_;
};
static_assert(cache_store<fault_store>);

struct three_tiers {
  any_store mem_store{std::in_place_type<memory_cache>, 1 << 20, 4};
  memory_cache* mem = mem_store.target<memory_cache>();
  any_store mid_store{std::in_place_type<fault_store>};
  fault_store* mid = mid_store.target<fault_store>();
  any_store far_store{std::in_place_type<fault_store>};
  fault_store* far = far_store.target<fault_store>();
  tiered_cache cache{{mem_store, mid_store, far_store}};
};

}  // namespace

TEST_CASE("any_store: shares the store it wraps") {
  any_store mem_store{std::in_place_type<memory_cache>, 1 << 20};
  auto* mem = mem_store.target<memory_cache>();
  any_store a = mem_store;
  any_store b = a;
  CHECK(b.put(key_n(1), as_bytes_view("x")));
  CHECK(mem->contains(key_n(1)));
  CHECK(text_of(*a.get(key_n(1))) == "x");
  CHECK(a.target<memory_cache>() == mem);
  CHECK(a.target<fault_store>() == nullptr);
  auto made = any_store(std::in_place_type<memory_cache>, std::size_t{1024}, std::size_t{2});
  REQUIRE(made.target<memory_cache>());
  CHECK(made.target<memory_cache>()->shard_count() == 2);
  CHECK(a.stats().puts == 1);
}

TEST_CASE("any_store: an empty handle is no cache, and tiered_cache leaves it out") {
  any_store none;
  CHECK_FALSE(none);
  CHECK_FALSE(none.get(key_n(1)));
  CHECK_FALSE(none.put(key_n(1), as_bytes_view("x")));
  CHECK(none.multi_get(std::vector<cache_key>{key_n(1), key_n(2)}).size() == 2);
  CHECK(none.stats().puts == 0);
  tiered_cache c({none, any_store(std::in_place_type<memory_cache>, 1 << 20)});
  CHECK(c.tier_count() == 1);
  CHECK(c.put(key_n(1), as_bytes_view("x")));
  CHECK(c.get(key_n(1)));
}

TEST_CASE("tiered_cache: a movable value that keeps its tiers and counters, any_store takes it by move") {
  static_assert(std::is_nothrow_move_constructible_v<tiered_cache> && std::is_nothrow_move_assignable_v<tiered_cache>);
  static_assert(!std::is_copy_constructible_v<tiered_cache>);
  any_store mem{std::in_place_type<memory_cache>, 1 << 20};
  tiered_cache a({mem});
  any_store& first_tier = a.tier(0);
  REQUIRE(a.put(key_n(1), as_bytes_view("one")));
  REQUIRE(a.get(key_n(1)));

  tiered_cache b(std::move(a));  // the state moves with it: same tiers (references stay valid), same counters
  CHECK(&b.tier(0) == &first_tier);
  CHECK(b.tier_count() == 1);
  CHECK(b.stats().hits == 1);
  CHECK(b.stats().puts == 1);
  auto v = b.get(key_n(1));
  REQUIRE(v);
  CHECK(text_of(*v) == "one");
  CHECK(b.stats().hits == 2);

  tiered_cache c;  // default: no tiers, misses
  CHECK_FALSE(c.get(key_n(1)));
  c = std::move(b);
  CHECK(c.stats().hits == 2);
  CHECK(text_of(*c.get(key_n(1))) == "one");

  // docs/loader.md: a loader's cache built from tiers, by value or in place
  any_store by_value(std::move(c));
  CHECK(text_of(*by_value.get(key_n(1))) == "one");
  CHECK(by_value.target<tiered_cache>()->stats().hits == 4);
  tiered_cache d({mem});
  any_store in_place(std::in_place_type<tiered_cache>, std::move(d));
  CHECK(text_of(*in_place.get(key_n(1))) == "one");  // the memory tier is shared with `mem`
  REQUIRE(in_place.put(key_n(2), as_bytes_view("two")));
  CHECK(mem.contains(key_n(2)));
}

TEST_CASE("tiered_cache: get looks up in order and promotes a hit into faster tiers") {
  three_tiers t;
  REQUIRE(t.far->put(key_n(1), as_bytes_view("deep")));
  auto v = t.cache.get(key_n(1));
  REQUIRE(v);
  CHECK(text_of(*v) == "deep");
  CHECK(t.mem->contains(key_n(1)));
  CHECK(t.mid->contains(key_n(1)));
  CHECK(t.cache.promotions() == 2);
  // Second get is served by memory: the other tiers see no more lookups.
  const auto mid_before = t.mid->stats();
  REQUIRE(t.cache.get(key_n(1)));
  CHECK(t.mid->stats().hits == mid_before.hits);
  CHECK(t.mid->stats().misses == mid_before.misses);
  CHECK_FALSE(t.cache.get(key_n(2)));
  const auto s = t.cache.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 1);
  CHECK(s.bytes_read == 8);
  const auto per = t.cache.tier_stats();
  REQUIRE(per.size() == 3);
  CHECK(per[0].hits == 1);
  CHECK(per[0].misses == 2);
  CHECK(per[2].hits == 1);
  CHECK(per[2].misses == 1);
}

TEST_CASE("tiered_cache: no promotion when turned off") {
  any_store mem_store{std::in_place_type<memory_cache>, 1 << 20};
  auto* mem = mem_store.target<memory_cache>();
  any_store far_store{std::in_place_type<fault_store>};
  auto* far = far_store.target<fault_store>();
  tiered_options opt;
  opt.promote_on_hit = false;
  tiered_cache c({mem_store, far_store}, opt);
  REQUIRE(far->put(key_n(1), as_bytes_view("x")));
  REQUIRE(c.get(key_n(1)));
  CHECK_FALSE(mem->contains(key_n(1)));
  CHECK(c.promotions() == 0);
}

TEST_CASE("tiered_cache: multi_get sends each tier only the keys still missing") {
  three_tiers t;
  REQUIRE(t.mem->put(key_n(0), as_bytes_view("zero")));
  REQUIRE(t.mid->put(key_n(1), as_bytes_view("one")));
  REQUIRE(t.far->put(key_n(2), as_bytes_view("two")));
  const std::vector<cache_key> keys = {key_n(0), key_n(1), key_n(2), key_n(3)};
  auto got = t.cache.multi_get(keys);
  REQUIRE(got.size() == 4);
  REQUIRE(got[0]);
  REQUIRE(got[1]);
  REQUIRE(got[2]);
  CHECK_FALSE(got[3]);
  CHECK(text_of(*got[0]) == "zero");
  CHECK(text_of(*got[1]) == "one");
  CHECK(text_of(*got[2]) == "two");
  CHECK(t.mid->batch_sizes == std::vector<std::size_t>{3});
  CHECK(t.far->batch_sizes == std::vector<std::size_t>{2});
  CHECK(t.mem->contains(key_n(1)));
  CHECK(t.mem->contains(key_n(2)));
  CHECK(t.mid->contains(key_n(2)));
  CHECK(t.cache.promotions() == 3);
  CHECK(t.cache.stats().hits == 3);
  CHECK(t.cache.stats().misses == 1);
  // All in memory now: the lower tiers see no batch at all except for the one missing key.
  got = t.cache.multi_get(keys);
  CHECK(t.mid->batch_sizes == std::vector<std::size_t>{3, 1});
  CHECK(t.far->batch_sizes == std::vector<std::size_t>{2, 1});
  CHECK(t.cache.multi_get(std::span<const cache_key>{}).empty());
}

TEST_CASE("tiered_cache: put writes through, or only to the first tier") {
  three_tiers t;
  CHECK(t.cache.put(key_n(5), as_bytes_view("five")));
  CHECK(t.mem->contains(key_n(5)));
  CHECK(t.mid->contains(key_n(5)));
  CHECK(t.far->contains(key_n(5)));
  CHECK(t.cache.stats().puts == 1);
  CHECK(t.cache.stats().bytes_written == 4);
  CHECK(t.cache.contains(key_n(5)));
  CHECK(t.cache.erase(key_n(5)));
  CHECK_FALSE(t.cache.contains(key_n(5)));
  CHECK(t.far->size() == 0);
  CHECK_FALSE(t.cache.erase(key_n(5)));

  any_store mem_store{std::in_place_type<memory_cache>, 1 << 20};
  auto* mem = mem_store.target<memory_cache>();
  any_store far_store{std::in_place_type<fault_store>};
  auto* far = far_store.target<fault_store>();
  tiered_options opt;
  opt.write_through = false;
  tiered_cache c({mem_store, far_store}, opt);
  CHECK(c.put(key_n(6), as_bytes_view("six")));
  CHECK(mem->contains(key_n(6)));
  CHECK_FALSE(far->contains(key_n(6)));
}

TEST_CASE("tiered_cache: a failing tier never fails the call") {
  three_tiers t;
  REQUIRE(t.far->put(key_n(1), as_bytes_view("deep")));
  SUBCASE("tier down: its misses are counted errors, the next tier answers") {
    t.mid->down = true;
    auto v = t.cache.get(key_n(1));
    REQUIRE(v);
    CHECK(text_of(*v) == "deep");
    CHECK(t.mem->contains(key_n(1)));  // promoted where it could be
    CHECK(t.cache.put(key_n(2), as_bytes_view("two")));  // stored by the healthy tiers
    CHECK(t.far->contains(key_n(2)));
    auto many = t.cache.multi_get(std::vector<cache_key>{key_n(3)});
    CHECK_FALSE(many[0]);
    const auto s = t.cache.stats();
    CHECK(s.errors == t.mid->stats().errors);
    CHECK(s.errors >= 3);  // get, promotion put, put, multi_get
    CHECK(s.hits == 1);
  }
  SUBCASE("tier throws: caught and counted by the tiered cache") {
    t.mid->throws = true;
    auto v = t.cache.get(key_n(1));
    REQUIRE(v);
    CHECK(text_of(*v) == "deep");
    auto many = t.cache.multi_get(std::vector<cache_key>{key_n(1), key_n(4)});
    REQUIRE(many[0]);
    CHECK_FALSE(many[1]);
    CHECK(t.cache.put(key_n(2), as_bytes_view("two")));
    CHECK(t.cache.contains(key_n(2)));
    CHECK(t.cache.erase(key_n(2)));
    CHECK(t.cache.stats().errors >= 5);
  }
  SUBCASE("every tier down: a miss, and put reports not stored") {
    any_store a_store{std::in_place_type<fault_store>};
    auto* a = a_store.target<fault_store>();
    any_store b_store{std::in_place_type<fault_store>};
    auto* b = b_store.target<fault_store>();
    a->down = b->down = true;
    tiered_cache c({a_store, b_store});
    CHECK_FALSE(c.get(key_n(1)));
    CHECK_FALSE(c.put(key_n(1), as_bytes_view("x")));
    CHECK(c.stats().misses == 1);
    CHECK(c.stats().puts == 0);
    CHECK(c.stats().errors == 4);
  }
}

TEST_CASE("tiered_cache: encoded values round trip through the tiers, zero-copy from memory") {
  three_tiers t;
  tensor emb = tensor::empty({4, 8}, dtype::f32);
  for (int i = 0; i < 32; ++i) emb.data<float>()[i] = static_cast<float>(i) * 0.5f;
  auto bytes = encode_value({{"emb", emb.view()}});
  REQUIRE(bytes);
  const auto k = make_key(key_inputs{"clip", "v1", "bucket=224;", as_bytes_view("jpeg bytes")});
  REQUIRE(t.far->put(k, *bytes));
  for (int round = 0; round < 2; ++round) {
    auto v = t.cache.get(k);
    REQUIRE(v);
    auto e = decode_value(*v);
    REQUIRE(e);
    auto out = e->tensor("emb");
    REQUIRE(out);
    CHECK(std::memcmp(out->data(), emb.data(), emb.nbytes()) == 0);
    if (round == 1) {  // served by memory: the tensor points into the memory store's buffer
      auto m = t.mem->get(k);
      REQUIRE(m);
      const auto* p = static_cast<const std::byte*>(out->data());
      CHECK(p >= m->bytes.data());
      CHECK(p + out->nbytes() <= m->bytes.data() + m->bytes.size());
    }
  }
}

TEST_CASE("tiered_cache: concurrent gets and puts") {
  any_store mem_store{std::in_place_type<memory_cache>, 32 * 1024, 4};
  auto* mem = mem_store.target<memory_cache>();
  any_store far_store{std::in_place_type<fault_store>};
  auto* far = far_store.target<fault_store>();
  tiered_cache c({mem_store, far_store});
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < 3000; ++i) {
        const int id = (i * 7 + t) % 300;
        const std::string val = "value-" + std::to_string(id);
        if (i % 3 == 0) {
          c.put(key_n(id), as_bytes_view(val));
        } else if (auto v = c.get(key_n(id)); v && text_of(*v) != val) {
          bad.fetch_add(1);
        }
      }
    });
  for (auto& x : th) x.join();
  CHECK(bad.load() == 0);
  CHECK(c.stats().errors == 0);
  CHECK(c.stats().hits > 0);
}
