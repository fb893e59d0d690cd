// NCCL communicator and cuBLAS GEMM. Argument checks and rendezvous timeouts run everywhere (no device
// needed); the collectives run with one thread per rank where a GPU is present, else print "no CUDA device".
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/cuda/buffer.hpp"
#include "jitembed/parallel/cuda/gemm.hpp"
#include "jitembed/parallel/nccl.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using namespace std::chrono_literals;

namespace {

bool have_device() {
  if (cuda::device_count() > 0) return true;
  std::printf("no CUDA device: skipping\n");
  return false;
}

// Thrown inside a rank's thread; the test's thread reports it.
void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

const std::vector<int>& world_devices() {
  static const std::vector<int> devs = [] {
    auto d = nccl_thread_devices();
    int version = 0;
    (void)ncclGetVersion(&version);
    std::printf("nccl world: %zu rank(s) as threads on GPU(s)", d.size());
    for (int x : d) std::printf(" %d", x);
    std::printf(" (NCCL %d)\n", version);
    return d;
  }();
  return devs;
}

// Runs fn(comm) on one thread per rank with a connected communicator; returns every rank's failure.
std::string run_world(const std::function<void(nccl_communicator&)>& fn, comm_options opt = {30s}) {
  const auto& devs = world_devices();
  const int n = static_cast<int>(devs.size());
  auto st = shared_store(hash_store());
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        JITEMBED_CUDA_CHECK(cudaSetDevice(devs[static_cast<std::size_t>(r)]));
        auto comm = nccl_communicator::create(st, r, n, devs[static_cast<std::size_t>(r)], opt).value();
        fn(comm);
        comm.synchronize().value();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string all;
  for (const auto& e : errors) {
    if (!e.empty()) all += e + "\n";
  }
  return all;
}

// Element conversions for every dtype NCCL carries.
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// A device tensor holding host values (allocated and freed on the communicator's stream).
template <class T>
tensor upload(const std::vector<T>& host, nccl_communicator& c) {
  tensor d = cuda::empty_device(shape{static_cast<std::int64_t>(host.size())}, dtype_of<T>::value, c.stream(),
                                c.cuda_device());
  if (!host.empty()) {
    JITEMBED_CUDA_CHECK(cudaMemcpyAsync(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, c.stream()));
  }
  return d;
}

// Copies back after the queued collectives (ordered on the stream; synchronize() polls NCCL's errors).
template <class T>
std::vector<T> download(const tensor& d, nccl_communicator& c) {
  std::vector<T> host(d.numel());
  if (!host.empty()) {
    JITEMBED_CUDA_CHECK(cudaMemcpyAsync(host.data(), d.data(), d.nbytes(), cudaMemcpyDeviceToHost, c.stream()));
  }
  c.synchronize().value();
  return host;
}

template <class T>
void expect_values(const std::vector<T>& got, const std::function<double(std::size_t)>& want, const std::string& what) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_double(got[i]);
    if (g != want(i)) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " +
                               std::to_string(want(i)));
    }
  }
}

// A CUDA view that is never dereferenced: argument checks reject before anything is enqueued.
tensor_view fake(dtype t, std::int64_t n, int ordinal = 0) {
  return tensor_view(reinterpret_cast<void*>(std::uintptr_t{0x100000}), t, shape{n}, device::cuda(ordinal));
}

template <class T>
void all_reduce_closed_form(nccl_communicator& c) {
  const int n = c.size(), r = c.rank();
  const std::size_t m = 1000;
  std::vector<T> x(m);
  for (std::size_t i = 0; i < m; ++i) x[i] = from_double<T>((r + 1) + static_cast<double>(i % 5));
  tensor sum = upload(x, c), mx = upload(x, c);
  c.all_reduce(sum, reduce_op::sum).value();
  c.all_reduce(mx, reduce_op::max).value();
  const std::string name(to_string(dtype_of<T>::value));
  expect_values(download<T>(sum, c), [&](std::size_t i) { return n * (n + 1) / 2.0 + n * static_cast<double>(i % 5); },
                "all_reduce sum " + name);
  expect_values(download<T>(mx, c), [&](std::size_t i) { return n + static_cast<double>(i % 5); }, "all_reduce max " + name);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Without a device: argument checks and rendezvous timeouts.

TEST_CASE("create rejects bad arguments before touching CUDA") {
  auto st = shared_store(hash_store());
  CHECK(nccl_communicator::create(shared_store(), 0, 2, 0).code() == errc::invalid_argument);
  CHECK(nccl_communicator::create(st, 0, 0, 0).code() == errc::invalid_argument);
  CHECK(nccl_communicator::create(st, -1, 2, 0).code() == errc::invalid_argument);
  auto r = nccl_communicator::create(st, 2, 2, 0);
  REQUIRE(r.code() == errc::invalid_argument);
  CHECK(r.error().message == "nccl: create: rank 2 outside [0, 2)");
  CHECK(nccl_communicator::create(st, 0, 2, -1).code() == errc::invalid_argument);
  CHECK(nccl_communicator::create(st, 0, 2, 0, comm_options{0ms}).code() == errc::invalid_argument);
  CHECK(nccl_communicator::create(st, 0, 2, 0, {}, "").code() == errc::invalid_argument);
  // A device that does not exist (there is none here, or not that many).
  auto missing = nccl_communicator::create(st, 0, 1, cuda::device_count() + 3);
  REQUIRE(missing.code() == errc::invalid_argument);
  CHECK(missing.error().message.find("does not exist") != std::string::npos);
}

TEST_CASE("a rank whose rank 0 never publishes the id times out instead of hanging") {
  shared_store st(hash_store{});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = nccl_communicator::create(st, 1, 2, 0, comm_options{200ms});
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(r.code() == errc::timeout);
  CHECK(r.error().message.find("rank 1 waiting for rank 0's unique id") != std::string::npos);
  CHECK(waited >= 200ms);
  CHECK(waited < 5s);

  // A value of the wrong size under the key is rejected, not copied.
  st.set("nccl/bad", std::string_view("short")).value();
  auto bad = nccl_communicator::create(st, 1, 2, 0, comm_options{200ms}, "nccl/bad");
  CHECK(bad.code() == errc::corrupt_data);
}

TEST_CASE("dtypes map to NCCL's, others are dtype_mismatch") {
  CHECK(detail::nccl_dtype(dtype::u8, "x").value() == ncclUint8);
  CHECK(detail::nccl_dtype(dtype::i8, "x").value() == ncclInt8);
  CHECK(detail::nccl_dtype(dtype::i32, "x").value() == ncclInt32);
  CHECK(detail::nccl_dtype(dtype::i64, "x").value() == ncclInt64);
  CHECK(detail::nccl_dtype(dtype::f16, "x").value() == ncclFloat16);
  CHECK(detail::nccl_dtype(dtype::bf16, "x").value() == ncclBfloat16);
  CHECK(detail::nccl_dtype(dtype::f32, "x").value() == ncclFloat32);
  CHECK(detail::nccl_dtype(dtype::f64, "x").value() == ncclFloat64);
  CHECK(detail::nccl_dtype(dtype::i16, "x").code() == errc::dtype_mismatch);
  CHECK(detail::nccl_dtype(dtype::boolean, "x").code() == errc::dtype_mismatch);
  CHECK(detail::nccl_op(reduce_op::sum) == ncclSum);
  CHECK(detail::nccl_op(reduce_op::max) == ncclMax);
}

TEST_CASE("operations reject bad arguments before anything is enqueued") {
  // A ref with no comm behind it: every call below must fail on its arguments, and calls with good
  // arguments fail with "empty communicator", so nothing ever reaches NCCL.
  nccl_communicator_ref c = nccl_communicator_ref::wrap(nullptr, nullptr, 1, 4, 0).value();
  CHECK(c.valid());
  CHECK(c.rank() == 1);
  CHECK(c.size() == 4);
  CHECK(c.device() == device::cuda(0));
  const auto f8 = fake(dtype::f32, 8), f32 = fake(dtype::f32, 32);
  std::vector<float> host(8);
  const tensor_view cpu(host.data(), dtype::f32, shape{8});

  auto is = [](const result<void>& r, errc code, const char* text = nullptr) {
    if (r.code() != code) return false;
    return text == nullptr || r.error().message.find(text) != std::string::npos;
  };
  CHECK(is(c.all_reduce(cpu, reduce_op::sum), errc::invalid_argument, "wrong device"));
  CHECK(is(c.all_reduce(fake(dtype::f32, 8, 1), reduce_op::sum), errc::invalid_argument, "wrong device"));
  const tensor_view strided(reinterpret_cast<void*>(std::uintptr_t{0x100000}), dtype::f32, shape{4, 2}, shape{1, 4},
                            device::cuda(0));
  CHECK(is(c.all_reduce(strided, reduce_op::sum), errc::invalid_argument, "not contiguous"));
  CHECK(is(c.all_reduce(fake(dtype::i16, 8), reduce_op::sum), errc::dtype_mismatch, "i16"));
  CHECK(is(c.broadcast(fake(dtype::boolean, 8), 0), errc::dtype_mismatch));
  CHECK(is(c.all_gather(f8, fake(dtype::f16, 32)), errc::dtype_mismatch));
  CHECK(is(c.all_gather(f8, fake(dtype::f32, 31)), errc::invalid_argument, "all_gather output: 31 elements, expected 32"));
  const std::int64_t three[] = {1, 1, 1}, neg[] = {8, -1, 1, 1}, uneven[] = {2, 8, 0, 3}, bad_sum[] = {2, 8, 0, 2};
  CHECK(is(c.all_gather_v(f8, fake(dtype::f32, 13), three), errc::invalid_argument, "3 counts for 4 ranks"));
  CHECK(is(c.all_gather_v(f8, fake(dtype::f32, 9), neg), errc::invalid_argument, "negative"));
  CHECK(is(c.all_gather_v(fake(dtype::f32, 7), fake(dtype::f32, 13), uneven), errc::invalid_argument, "input"));
  CHECK(is(c.all_gather_v(f8, fake(dtype::f32, 12), uneven), errc::invalid_argument, "output"));
  CHECK(is(c.reduce_scatter(f32, fake(dtype::f32, 7), reduce_op::sum), errc::invalid_argument, "reduce_scatter input"));
  CHECK(is(c.reduce_scatter(f32, fake(dtype::i32, 8), reduce_op::sum), errc::dtype_mismatch));
  CHECK(is(c.reduce_scatter_v(fake(dtype::f32, 12), f8, uneven, reduce_op::sum), errc::invalid_argument, "input"));
  CHECK(is(c.reduce_scatter_v(fake(dtype::f32, 13), fake(dtype::f32, 2), uneven, reduce_op::sum), errc::invalid_argument,
           "output"));
  CHECK(is(c.broadcast(f8, 4), errc::invalid_argument, "peer 4 outside [0, 4)"));
  CHECK(is(c.broadcast(f8, -1), errc::invalid_argument));
  CHECK(is(c.all_to_all(fake(dtype::f32, 10), fake(dtype::f32, 10)), errc::invalid_argument, "equal chunks"));
  CHECK(is(c.all_to_all(f32, f8), errc::invalid_argument));
  CHECK(is(c.all_to_all_v(fake(dtype::f32, 13), uneven, fake(dtype::f32, 13), bad_sum), errc::invalid_argument,
           "all_to_all_v output: 13 elements, expected 12"));
  CHECK(is(c.all_to_all_v(fake(dtype::f32, 13), bad_sum, fake(dtype::f32, 12), bad_sum), errc::invalid_argument,
           "all_to_all_v input"));
  CHECK(is(c.send(f8, 4), errc::invalid_argument));
  CHECK(is(c.recv(f8, -1), errc::invalid_argument));
  CHECK(is(c.send(f8, 1), errc::invalid_argument, "is this rank"));
  const p2p_op ops[] = {p2p_op::isend(f8, 2), p2p_op::irecv(f8, 0), p2p_op::isend(cpu, 3)};
  CHECK(is(c.batch_p2p(ops), errc::invalid_argument, "wrong device"));
  CHECK(c.split(-2, 0).code() == errc::invalid_argument);
  // Good arguments reach the (absent) communicator and stop there.
  CHECK(is(c.all_reduce(f8, reduce_op::max), errc::invalid_argument, "empty communicator"));
  CHECK(is(c.all_gather_v(f8, fake(dtype::f32, 13), uneven), errc::invalid_argument, "empty communicator"));
  CHECK(is(c.all_to_all_v(fake(dtype::f32, 13), uneven, fake(dtype::f32, 12), bad_sum), errc::invalid_argument, "empty"));
  CHECK(is(c.barrier(), errc::invalid_argument, "empty communicator"));
  CHECK(is(c.synchronize(), errc::invalid_argument, "empty communicator"));
  CHECK(c.stats().total_calls() == 0);
  CHECK_FALSE(c.failed());

  CHECK(nccl_communicator_ref::wrap(nullptr, nullptr, 4, 4, 0).code() == errc::invalid_argument);
  CHECK(nccl_communicator_ref::wrap(nullptr, nullptr).code() == errc::invalid_argument);

  nccl_communicator none;  // what a kNoColor rank gets from split()
  CHECK_FALSE(none.valid());
  CHECK(none.rank() == -1);
  CHECK(none.size() == 0);
  CHECK(none.barrier().code() == errc::invalid_argument);
  CHECK_FALSE(none.ref().valid());
  nccl_communicator moved = std::move(none);
  CHECK_FALSE(moved.valid());
}

TEST_CASE("cublas gemm: argument checks before the GPU") {
  auto v = [](dtype t, std::int64_t r, std::int64_t c, int dev = 0) {
    return tensor_view(reinterpret_cast<void*>(std::uintptr_t{0x100000}), t, shape{r, c}, device::cuda(dev));
  };
  const auto ok = detail::check_gemm(false, false, v(dtype::f32, 3, 5), v(dtype::f32, 5, 7), v(dtype::f32, 3, 7), 0);
  REQUIRE(ok);
  CHECK(ok->m == 3);
  CHECK(ok->n == 7);
  CHECK(ok->k == 5);
  const auto tt = detail::check_gemm(true, true, v(dtype::bf16, 5, 3), v(dtype::bf16, 7, 5), v(dtype::bf16, 3, 7), 0);
  REQUIRE(tt);
  CHECK(tt->m == 3);
  CHECK(tt->n == 7);
  CHECK(tt->k == 5);
  auto bad = detail::check_gemm(false, false, v(dtype::f32, 3, 5), v(dtype::f32, 4, 7), v(dtype::f32, 3, 7), 0);
  REQUIRE(bad.code() == errc::invalid_argument);
  CHECK(bad.error().message == "gemm: op(A) is [3,5] but op(B) is [4,7]: inner extents differ");
  CHECK(detail::check_gemm(false, false, v(dtype::f32, 3, 5), v(dtype::f32, 5, 7), v(dtype::f32, 3, 6), 0).code() ==
        errc::invalid_argument);
  CHECK(detail::check_gemm(false, false, v(dtype::f16, 3, 5), v(dtype::f16, 5, 7), v(dtype::f16, 3, 7), 0).code() ==
        errc::dtype_mismatch);
  CHECK(detail::check_gemm(false, false, v(dtype::f32, 3, 5), v(dtype::bf16, 5, 7), v(dtype::f32, 3, 7), 0).code() ==
        errc::dtype_mismatch);
  CHECK(detail::check_gemm(false, false, v(dtype::f32, 3, 5), v(dtype::f32, 5, 7), v(dtype::f32, 3, 7, 1), 0).code() ==
        errc::invalid_argument);
  const tensor_view three_d(reinterpret_cast<void*>(std::uintptr_t{0x100000}), dtype::f32, shape{2, 3, 5}, device::cuda(0));
  CHECK(detail::check_gemm(false, false, three_d, v(dtype::f32, 5, 7), v(dtype::f32, 3, 7), 0).code() ==
        errc::invalid_argument);
  std::vector<float> host(15);
  const tensor_view cpu(host.data(), dtype::f32, shape{3, 5});
  CHECK(detail::check_gemm(false, false, cpu, v(dtype::f32, 5, 7), v(dtype::f32, 3, 7), 0).code() == errc::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------
// On a device: every collective with closed-form, rank-valued inputs.

TEST_CASE("all_reduce sum and max in every dtype") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    all_reduce_closed_form<std::uint8_t>(c);
    all_reduce_closed_form<std::int8_t>(c);
    all_reduce_closed_form<std::int32_t>(c);
    all_reduce_closed_form<std::int64_t>(c);
    all_reduce_closed_form<float16>(c);
    all_reduce_closed_form<bfloat16>(c);
    all_reduce_closed_form<float>(c);
    all_reduce_closed_form<double>(c);
    expect(c.stats()[coll::all_reduce].calls == 16, "16 all_reduce calls counted");
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("all_gather and uneven all_gather_v") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int n = c.size(), r = c.rank();
    const std::size_t m = 37;
    std::vector<float> x(m);
    for (std::size_t i = 0; i < m; ++i) x[i] = static_cast<float>(r * 100 + static_cast<int>(i));
    tensor in = upload(x, c);
    tensor out = upload(std::vector<float>(m * static_cast<std::size_t>(n), -1.0f), c);
    c.all_gather(in, out).value();
    expect_values(download<float>(out, c), [&](std::size_t i) { return (i / m) * 100.0 + static_cast<double>(i % m); },
                  "all_gather");

    // counts r+2, with rank 1's block empty (torch.chunk's short tail, an empty shard).
    std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
    std::vector<std::size_t> offsets(static_cast<std::size_t>(n));
    std::size_t total = 0;
    for (int q = 0; q < n; ++q) {
      counts[static_cast<std::size_t>(q)] = q == 1 ? 0 : q + 2;
      offsets[static_cast<std::size_t>(q)] = total;
      total += static_cast<std::size_t>(counts[static_cast<std::size_t>(q)]);
    }
    std::vector<std::int32_t> mine(static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]));
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = r * 1000 + static_cast<int>(i);
    tensor vin = upload(mine, c);
    tensor vout = upload(std::vector<std::int32_t>(total, -1), c);
    c.all_gather_v(vin, vout, counts).value();
    const auto got = download<std::int32_t>(vout, c);
    for (int q = 0; q < n; ++q) {
      for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i) {
        expect(got[offsets[static_cast<std::size_t>(q)] + static_cast<std::size_t>(i)] == q * 1000 + i,
               "all_gather_v block " + std::to_string(q));
      }
    }
    expect(c.stats()[coll::all_gather].calls == 2, "2 all_gather calls");
    expect(c.stats()[coll::all_gather].bytes == m * n * 4 + total * 4, "all_gather bytes = output sizes");
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("reduce_scatter and uneven reduce_scatter_v") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int n = c.size(), r = c.rank();
    const std::size_t m = 29;
    std::vector<float> x(m * static_cast<std::size_t>(n));
    for (std::size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(r + static_cast<int>(j));
    tensor in = upload(x, c);
    tensor out = upload(std::vector<float>(m, -1.0f), c);
    c.reduce_scatter(in, out, reduce_op::sum).value();
    // Σ_q (q + r·m + i) = n(n−1)/2 + n(r·m + i)
    expect_values(download<float>(out, c),
                  [&](std::size_t i) { return n * (n - 1) / 2.0 + n * static_cast<double>(r * m + i); }, "reduce_scatter");

    std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
    std::size_t total = 0, mine_off = 0;
    for (int q = 0; q < n; ++q) {
      counts[static_cast<std::size_t>(q)] = q == n - 1 && n > 1 ? 0 : 3 * q + 1;
      if (q == r) mine_off = total;
      total += static_cast<std::size_t>(counts[static_cast<std::size_t>(q)]);
    }
    std::vector<double> y(total);
    for (std::size_t j = 0; j < total; ++j) y[j] = (r + 1) * 0.5 + static_cast<double>(j);
    tensor vin = upload(y, c);
    tensor vout = upload(std::vector<double>(static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]), -1.0), c);
    c.reduce_scatter_v(vin, vout, counts, reduce_op::max).value();
    expect_values(download<double>(vout, c), [&](std::size_t i) { return n * 0.5 + static_cast<double>(mine_off + i); },
                  "reduce_scatter_v max");
    expect(c.stats()[coll::reduce_scatter].bytes == x.size() * 4 + total * 8, "reduce_scatter bytes = input sizes");
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("broadcast from the last rank") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int root = c.size() - 1;
    std::vector<std::int64_t> x(513, 0);
    if (c.rank() == root) {
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 7 + static_cast<std::int64_t>(i) * 3;
    }
    tensor buf = upload(x, c);
    c.broadcast(buf, root).value();
    expect_values(download<std::int64_t>(buf, c), [](std::size_t i) { return 7.0 + 3.0 * static_cast<double>(i); },
                  "broadcast");
    expect(c.stats()[coll::broadcast].bytes == 513 * 8, "broadcast bytes");
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("all_to_all and uneven all_to_all_v") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int n = c.size(), r = c.rank();
    const std::size_t k = 11;  // elements per peer
    std::vector<float> x(k * static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < k; ++i) x[static_cast<std::size_t>(j) * k + i] = static_cast<float>(r * 1000 + j * 10 + static_cast<int>(i));
    }
    tensor in = upload(x, c);
    tensor out = upload(std::vector<float>(x.size(), -1.0f), c);
    c.all_to_all(in, out).value();
    // block s of my output is the block rank s addressed to me
    expect_values(download<float>(out, c),
                  [&](std::size_t e) { return (e / k) * 1000.0 + r * 10.0 + static_cast<double>(e % k); }, "all_to_all");

    // rank a sends (a + b) % 3 elements to rank b (zero for some pairs)
    auto cnt = [](int a, int b) { return static_cast<std::int64_t>((a + b) % 3); };
    std::vector<std::int64_t> sc(static_cast<std::size_t>(n)), rc(static_cast<std::size_t>(n));
    std::vector<std::int32_t> send;
    for (int b = 0; b < n; ++b) {
      sc[static_cast<std::size_t>(b)] = cnt(r, b);
      rc[static_cast<std::size_t>(b)] = cnt(b, r);
      for (std::int64_t i = 0; i < cnt(r, b); ++i) send.push_back(r * 1000 + b * 10 + static_cast<int>(i));
    }
    std::size_t rtotal = 0;
    for (auto v : rc) rtotal += static_cast<std::size_t>(v);
    tensor vin = upload(send, c);
    tensor vout = upload(std::vector<std::int32_t>(rtotal, -1), c);
    c.all_to_all_v(vin, sc, vout, rc).value();
    const auto got = download<std::int32_t>(vout, c);
    std::size_t off = 0;
    for (int a = 0; a < n; ++a) {
      for (std::int64_t i = 0; i < cnt(a, r); ++i) {
        expect(got[off++] == a * 1000 + r * 10 + i, "all_to_all_v from rank " + std::to_string(a));
      }
    }
    expect(c.stats()[coll::all_to_all].calls == 2, "2 all_to_all calls");
    expect(c.stats()[coll::all_to_all].bytes == x.size() * 4 + send.size() * 4, "all_to_all bytes = send sizes");
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("batch_p2p ring and send/recv pairs") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int n = c.size(), r = c.rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<float> x(100);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r * 1000 + static_cast<int>(i));
    tensor sbuf = upload(x, c);
    tensor rbuf = upload(std::vector<float>(x.size(), -1.0f), c);
    const p2p_op ops[] = {p2p_op::irecv(rbuf, prev), p2p_op::isend(sbuf, next)};  // with n = 1: to and from itself
    c.batch_p2p(ops).value();
    expect_values(download<float>(rbuf, c), [&](std::size_t i) { return prev * 1000.0 + static_cast<double>(i); },
                  "ring");
    expect(c.stats()[coll::send].bytes == 400 && c.stats()[coll::recv].bytes == 400, "p2p bytes");
    if (n < 2) return;  // a lone send needs a peer
    // even ranks send to the odd rank above them
    if (r % 2 == 0 && r + 1 < n) c.send(sbuf, r + 1).value();
    if (r % 2 == 1) {
      c.recv(rbuf, r - 1).value();
      expect_values(download<float>(rbuf, c), [&](std::size_t i) { return (r - 1) * 1000.0 + static_cast<double>(i); },
                    "send/recv");
    }
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("split by parity, reversed keys, and kNoColor") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int n = c.size(), r = c.rank();
    auto sub = c.split(r % 2, -r).value();
    expect(sub.valid(), "split member is valid");
    int members = 0, below = 0;  // ordered by key = −rank: higher parent ranks first
    for (int q = r % 2; q < n; q += 2) {
      ++members;
      if (q > r) ++below;
    }
    expect(sub.size() == members, "sub size " + std::to_string(sub.size()));
    expect(sub.rank() == below, "sub rank " + std::to_string(sub.rank()));
    expect(sub.stats().total_calls() == 0, "a new communicator starts with empty stats");
    std::vector<std::int32_t> x(10, r + 1);
    tensor t = cuda::empty_device(shape{10}, dtype::i32, c.stream(), c.cuda_device());
    JITEMBED_CUDA_CHECK(cudaMemcpyAsync(t.data(), x.data(), 40, cudaMemcpyHostToDevice, c.stream()));
    JITEMBED_CUDA_CHECK(cudaStreamSynchronize(c.stream()));
    sub.all_reduce(t, reduce_op::sum).value();
    sub.synchronize().value();
    std::int64_t want = 0;
    for (int q = r % 2; q < n; q += 2) want += q + 1;
    std::vector<std::int32_t> back(10);
    JITEMBED_CUDA_CHECK(cudaMemcpy(back.data(), t.data(), 40, cudaMemcpyDeviceToHost));
    for (auto v : back) expect(v == want, "sub all_reduce " + std::to_string(v));
    expect(sub.stats()[coll::all_reduce].calls == 1 && c.stats()[coll::all_reduce].calls == 0, "stats per communicator");

    auto none = c.split(r == 0 ? kNoColor : 0, r).value();
    expect(none.valid() == (r != 0), "kNoColor gives an empty communicator");
    if (r != 0) expect(none.size() == n - 1 && none.rank() == r - 1, "the others form one group");
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("barrier, set_stream, ref views and the byte formulas") {
  if (!have_device()) return;
  const auto err = run_world([](nccl_communicator& c) {
    const int n = c.size();
    c.barrier().value();
    expect(c.stats()[coll::barrier].calls == 1 && c.stats()[coll::all_reduce].calls == 0, "barrier counts as barrier");

    const cudaStream_t own = c.stream();
    auto mine = cuda::stream::create().value();
    c.set_stream(mine.get());
    expect(c.stream() == mine.get(), "set_stream");
    std::vector<float> x(1024, 1.0f);
    tensor t = cuda::empty_device(shape{1024}, dtype::f32, mine, c.cuda_device());
    JITEMBED_CUDA_CHECK(cudaMemcpyAsync(t.data(), x.data(), 4096, cudaMemcpyHostToDevice, mine.get()));
    c.all_reduce(t, reduce_op::sum).value();
    c.synchronize().value();
    JITEMBED_CUDA_CHECK(cudaMemcpy(x.data(), t.data(), 4096, cudaMemcpyDeviceToHost));
    for (float v : x) expect(v == static_cast<float>(n), "all_reduce on the caller's stream");
    expect(c.stats()[coll::all_reduce].bytes == 4096, "all_reduce size = buffer");
    expect(std::abs(c.stats().bus_bytes(coll::all_reduce, n) - 4096.0 * 2 * (n - 1) / n) < 1e-9, "bus bytes 2(n-1)/n");

    auto ref = nccl_communicator_ref::wrap(c.get(), c.stream(), comm_options{c.timeout()}).value();
    expect(ref.rank() == c.rank() && ref.size() == n && ref.cuda_device() == c.cuda_device(), "wrap reads NCCL");
    ref.all_reduce(t, reduce_op::sum).value();
    ref.synchronize().value();
    JITEMBED_CUDA_CHECK(cudaMemcpy(x.data(), t.data(), 4096, cudaMemcpyDeviceToHost));
    for (float v : x) expect(v == static_cast<float>(n * n), "all_reduce through the ref");
    expect(ref.stats()[coll::all_reduce].calls == 1 && c.stats()[coll::all_reduce].calls == 1, "ref has its own stats");
    t = tensor();  // freed on `mine` before it goes
    mine.synchronize();
    c.set_stream(own);
  });
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("after abort every call fails at once with comm_failed") {
  if (!have_device()) return;
  // Abort only once every rank's barrier has finished: a peer may still read this rank's buffers until then.
  std::latch all_done(static_cast<std::ptrdiff_t>(world_devices().size()));
  const auto err = run_world([&](nccl_communicator& c) {
    c.barrier().value();
    all_done.arrive_and_wait();
    c.abort();
    expect(c.failed(), "failed after abort");
    expect(c.get() == nullptr, "no handle after abort");
    const auto t0 = std::chrono::steady_clock::now();
    tensor_view v(reinterpret_cast<void*>(std::uintptr_t{0x100000}), dtype::f32, shape{4}, c.device());
    expect(c.all_reduce(v, reduce_op::sum).code() == errc::comm_failed, "all_reduce after abort");
    expect(c.synchronize().code() == errc::comm_failed, "synchronize after abort");
    expect(c.split(0, 0).code() == errc::comm_failed, "split after abort");
    expect(std::chrono::steady_clock::now() - t0 < 1s, "at once");
  });
  // run_world's final synchronize() reports the abort: every rank fails with exactly that, and nothing else.
  const std::string want = "comm_failed: nccl: synchronize: the communicator failed earlier and was aborted\n";
  std::string all_ranks;
  for (std::size_t r = 0; r < world_devices().size(); ++r) all_ranks += "rank " + std::to_string(r) + ": " + want;
  CHECK(err == all_ranks);
}

TEST_CASE("a peer that never joins makes create time out, not hang") {
  if (!have_device()) return;
  // On its own thread, so that a hang (the bug this guards against) fails the test instead of the run.
  auto st = shared_store(hash_store());
  const int dev = world_devices().front();
  auto outcome = std::make_shared<std::promise<error_info>>();
  auto done = outcome->get_future();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread([st, dev, outcome] {
    (void)cudaSetDevice(dev);
    auto r = nccl_communicator::create(st, 0, 2, dev, comm_options{1500ms});
    outcome->set_value(r ? error_info{} : r.error());
  }).detach();
  REQUIRE_MESSAGE(done.wait_for(30s) == std::future_status::ready, "create hung on a peer that never joined");
  const error_info e = done.get();
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  CHECK(e.code == errc::timeout);
  CHECK(e.message.find("never joined") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------
// cuBLAS GEMM against a CPU reference (double accumulation over the same rounded inputs).

namespace {

std::vector<float> cpu_gemm(bool ta, bool tb, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                            float beta, const std::vector<float>& c, int m, int n, int k) {
  std::vector<float> out(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[static_cast<std::size_t>(p) * m + i] : a[static_cast<std::size_t>(i) * k + p];
        const float bv = tb ? b[static_cast<std::size_t>(j) * k + p] : b[static_cast<std::size_t>(p) * n + j];
        s += static_cast<double>(av) * bv;
      }
      out[static_cast<std::size_t>(i) * n + j] = static_cast<float>(alpha * s + beta * c[static_cast<std::size_t>(i) * n + j]);
    }
  }
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 1e-6;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::abs(static_cast<double>(want[i])));
  }
  return num / den;
}

template <class T>
tensor to_gpu(const std::vector<T>& h, std::int64_t rows, std::int64_t cols, cuda::stream_ref s) {
  tensor d = cuda::empty_device(shape{rows, cols}, dtype_of<T>::value, s);
  JITEMBED_CUDA_CHECK(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  return d;
}

}  // namespace

TEST_CASE("cublas gemm f32 and bf16 match the CPU reference in every transpose combination") {
  if (!have_device()) return;
  JITEMBED_CUDA_CHECK(cudaSetDevice(0));
  auto s = cuda::stream::create().value();
  auto h = cublas_handle::create(s).value();
  CHECK(h.cuda_device() == 0);
  const int m = 37, n = 53, k = 129;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n), c(static_cast<std::size_t>(m) * n);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.11f * static_cast<float>(i));
      for (std::size_t i = 0; i < c.size(); ++i) c[i] = 0.01f * static_cast<float>(i % 17);
      const float alpha = 0.75f, beta = 0.5f;
      const auto want = cpu_gemm(ta, tb, alpha, a, b, beta, c, m, n, k);

      tensor da = to_gpu(a, ta ? k : m, ta ? m : k, s), db = to_gpu(b, tb ? n : k, tb ? k : n, s), dc = to_gpu(c, m, n, s);
      gemm(h, ta, tb, alpha, da, db, beta, dc);
      std::vector<float> got(c.size());
      JITEMBED_CUDA_CHECK(cudaMemcpyAsync(got.data(), dc.data(), dc.nbytes(), cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();
      CHECK(rel_err(got, want) < 1e-5);

      // bf16: the reference uses the same bf16-rounded inputs; the output is rounded to bf16 (2^-8).
      auto rounded = [](std::vector<float> v) {
        for (auto& x : v) x = static_cast<float>(bfloat16(x));
        return v;
      };
      auto to_bf = [](const std::vector<float>& v) {
        std::vector<bfloat16> o(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) o[i] = bfloat16(v[i]);
        return o;
      };
      const auto ra = rounded(a), rb = rounded(b), rc = rounded(c);
      const auto want_bf = cpu_gemm(ta, tb, alpha, ra, rb, beta, rc, m, n, k);
      tensor ha = to_gpu(to_bf(a), ta ? k : m, ta ? m : k, s), hb = to_gpu(to_bf(b), tb ? n : k, tb ? k : n, s);
      tensor hc = to_gpu(to_bf(c), m, n, s);
      gemm(h, ta, tb, alpha, ha, hb, beta, hc);
      std::vector<bfloat16> got_bf(c.size());
      JITEMBED_CUDA_CHECK(cudaMemcpyAsync(got_bf.data(), hc.data(), hc.nbytes(), cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();
      std::vector<float> got_f(c.size());
      for (std::size_t i = 0; i < c.size(); ++i) got_f[i] = static_cast<float>(got_bf[i]);
      CHECK(rel_err(got_f, want_bf) < 1e-2);
    }
  }
  // Shapes that do not fit are rejected with the numbers.
  tensor a = cuda::empty_device(shape{4, 5}, dtype::f32, s), b = cuda::empty_device(shape{6, 7}, dtype::f32, s);
  tensor c = cuda::empty_device(shape{4, 7}, dtype::f32, s);
  CHECK_THROWS_WITH_AS(gemm(h, false, false, 1.0f, a, b, 0.0f, c),
                       "invalid_argument: gemm: op(A) is [4,5] but op(B) is [6,7]: inner extents differ", jitembed::error);
  s.synchronize();
}
