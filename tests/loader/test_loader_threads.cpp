// jit_loader's workers start all or none: when the system has no thread to spare, create says
// resource_exhausted, after stopping the workers that started (they may already have sent requests, which
// the loader cancels and waits for), instead of terminating the process. Run in a forked child whose
// address space is capped (RLIMIT_AS; not under a sanitizer, which reserves far more address space).
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "loader/loader_test_util.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define JITEMBED_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define JITEMBED_TEST_SANITIZED 1
#endif
#endif

#ifndef JITEMBED_TEST_SANITIZED
TEST_CASE("a loader whose workers cannot all start: resource_exhausted from create, no crash") {
  using namespace loader_test;
  temp_dataset ds(12);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(60);               // a start that never returns is a failure, not a hang
    auto cc = local_client();  // made in the child: a forked process has none of its parent's threads
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    // 64 MiB more address space: a few thread stacks, not 100000
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (rlim_t{64} << 20);
    const rlimit lim{cap, cap};
    if (pages <= 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(90);
    auto o = base_options();
    o.workers = 100000;
    auto l = client::jit_loader::create(ds.data, cc, o);
    ::_exit(l ? 2 : l.code() == errc::resource_exhausted ? 0 : 1);
  }
  int status = 0;
  REQUIRE(pid > 0);
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
