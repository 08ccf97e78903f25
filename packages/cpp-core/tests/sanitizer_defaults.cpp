// Options the sanitizer runtimes read at start-up, compiled into the test
// binary so plain `ctest` behaves like the nox session. An impossible
// allocation must come back as nullptr (as from the real allocator) so the
// bad_alloc paths are exercised rather than aborted. Leak checking stays on.
// TSan's die_after_fork is off because ThreadPool.SurvivesFork deliberately
// starts a fresh pool in a child of a multi-threaded process: the case the
// pool's fork handling exists for.
// In builds without sanitizers these functions are never called.
extern "C" {
const char* __asan_default_options() { return "allocator_may_return_null=1:detect_leaks=1"; }
const char* __tsan_default_options() { return "allocator_may_return_null=1:die_after_fork=0"; }
const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }
}
