// The one doctest main shared by every test executable. A --test-case filter that matches no test case
// fails (exit 2): ctest runs each case by name, and a name it cut (at a ';') or a renamed case would
// otherwise "pass" without running anything.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

namespace {

int g_cases_run = -1;  // test cases that passed the filters, from the last run; -1: no run

struct count_listener : doctest::IReporter {
  explicit count_listener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_cases_run = static_cast<int>(s.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("jitembed_count", 1, count_listener);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (ctx.shouldExit() || rc != 0) return rc;
  bool by_name = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (a.starts_with("--test-case=") || a.starts_with("-tc=")) by_name = true;
  }
  if (by_name && g_cases_run == 0) {
    std::fprintf(stderr,
                 "doctest_main: the --test-case filter matched no test case (a name with ';' is cut by ctest)\n");
    return 2;
  }
  return rc;
}
