// Runs a test body in a forked child whose address space is capped (RLIMIT_AS), so that thread stacks
// cannot be mapped: how the tests make "no thread to spare" happen. Not under a sanitizer, which reserves
// far more address space (JITEMBED_TEST_SANITIZED is defined there).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define JITEMBED_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define JITEMBED_TEST_SANITIZED 1
#endif
#endif

namespace jitembed::test {

// Forks; the child runs `before_cap` (e.g. what starts threads of its own: a forked process has none of
// its parent's), caps its address space at what it uses plus 64 MiB (a few thread stacks), runs `body` and
// exits with its value. Returns that exit status; -1 when the child was killed by a signal (e.g. the 60 s
// alarm of a start that never returns), -2 when fork or waitpid failed; 90 when the cap could not be set.
inline int run_capped(const std::function<int()>& body, const std::function<void()>& before_cap = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(60);
    if (before_cap) before_cap();
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (rlim_t{64} << 20);
    const rlimit lim{cap, cap};
    if (pages <= 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(90);
    ::_exit(body());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace jitembed::test
