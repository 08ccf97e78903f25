// tierkit_bridge._bridge: the compiled half of tierkit_bridge. Registers the
// Buffer type, the ops, the allocator submodule and the error translation
// (core's exceptions -> ValueError / TypeError / MemoryError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "buffer.h"
#include "ops.h"
#include "tierkit/caching_allocator.h"
#include "tierkit/error.h"

namespace py = pybind11;
using namespace tierkit_bridge;

namespace {

void bind_allocator(py::module_& m) {
  auto a = m.def_submodule("allocator", "Core's host caching allocator, as used by Buffer(cached=True).");
  a.def(
      "stats",
      [] {
        const tierkit::AllocatorStats s = tierkit::default_host_allocator().stats();
        py::dict d;
        d["bytes_in_use"] = s.bytes_in_use;
        d["bytes_cached"] = s.bytes_cached;
        d["peak_bytes_in_use"] = s.peak_bytes_in_use;
        d["allocations"] = s.allocations;
        d["frees"] = s.frees;
        d["cache_hits"] = s.cache_hits;
        d["cache_misses"] = s.cache_misses;
        d["failed_allocations"] = s.failed_allocations;
        d["evictions"] = s.evictions;
        d["max_cached_bytes"] = s.max_cached_bytes;
        return d;
      },
      "Counters of the process-wide caching allocator, as a dict.");
  a.def(
      "release_cached", [] { tierkit::default_host_allocator().release_cached(); },
      "Return every cached, unused block to the system.");
  a.def(
      "trim", [](std::size_t max_bytes) { tierkit::default_host_allocator().trim(max_bytes); },
      py::arg("max_bytes"), "Free cached blocks, largest first, until at most ``max_bytes`` stay cached.");
  a.def(
      "set_max_cached_bytes",
      [](std::size_t max_bytes) { tierkit::default_host_allocator().set_max_cached_bytes(max_bytes); },
      py::arg("max_bytes"), "Cap the cache (default 1 GiB); blocks given back beyond it go to the system.");
  a.def("set_enabled", &set_output_caching, py::arg("enabled"),
        "Make allocating ops (out=None) take their output from the caching allocator.");
  a.def("is_enabled", &output_caching);
}

}  // namespace

PYBIND11_MODULE(_bridge, m) {
  m.doc() = "tierkit core's buffers and kernels, zero-copy, with the GIL released around native loops.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tierkit::DTypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const tierkit::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const tierkit::OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });

  bind_buffer(m);
  bind_ops(m);
  bind_rows(m);
  bind_allocator(m);

#ifdef TIERKIT_SANITIZE_BUILD
  // Only in sanitizer builds: a deliberate heap overflow that ASan must
  // report. The sanitize session calls it in a subprocess.
  m.def("_asan_canary", [] {
    tierkit::Buffer b(64);
    volatile char* p = static_cast<char*>(b.data());
    p[64] = 1;
  });
#endif
}
