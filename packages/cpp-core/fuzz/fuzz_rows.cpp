// libFuzzer target: core's row kernels (rms_norm forward, backward, the
// fused add) over arbitrary row counts, lengths, values (any bit pattern)
// and aliasing (y = x, h = residual, dx = dy, the weight inside an output),
// each against the same kernel on separate copies of its inputs (bit for
// bit: the kernels' order is fixed), and finite rows of modest size against
// a long double reference. A finding: a crash, a sanitizer report, or a
// value that differs (abort()).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "fuzz_input.h"
#include "tierkit/rms_norm.h"

namespace {

using tierkit::BFloat16;
using tierkit::Half;
namespace k = tierkit::kernels;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "tierkit fuzz finding: %s\n", what);
  std::abort();
}

// Runs chunks of `chunk` rows in reverse: an order and split unlike the pool's.
struct ReverseRunner {
  std::int64_t chunk = 1;
  template <typename Fn>
  void operator()(std::int64_t n, std::int64_t, const Fn& fn) const {
    for (std::int64_t hi = n; hi > 0; hi -= chunk) fn(hi > chunk ? hi - chunk : 0, hi);
  }
};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
std::vector<T> values(tierkit_fuzz::Input& in, std::size_t n, bool finite) {
  std::vector<T> v(n);
  for (auto& e : v) {
    if (finite) {
      tierkit::store_compute(&e, static_cast<tierkit::compute_t<T>>(in.in(-64, 64)) / 8);
    } else {
      in.bits(&e, sizeof(T));
    }
  }
  return v;
}

template <typename T>
void check(tierkit_fuzz::Input& in) {
  using C = tierkit::compute_t<T>;
  const std::int64_t rows = in.in(0, 40), d = in.in(0, 600), n = rows * d;
  const bool finite = in.flag();
  const double eps = in.flag() ? 1e-6 : 0.0;
  const auto x = values<T>(in, static_cast<std::size_t>(n), finite);
  const auto res = values<T>(in, static_cast<std::size_t>(n), finite);
  const auto dy = values<T>(in, static_cast<std::size_t>(n), finite);
  const ReverseRunner run{in.in(1, 7)};
  const std::int64_t wrow = rows ? in.in(0, rows - 1) : 0;
  const bool with_weight = in.flag();

  // Forward with separate buffers: the reference for every aliased form.
  std::vector<T> w = with_weight ? values<T>(in, static_cast<std::size_t>(d), finite) : std::vector<T>();
  const T* wp = with_weight ? w.data() : nullptr;
  std::vector<T> y(static_cast<std::size_t>(n));
  std::vector<C> rstd(static_cast<std::size_t>(rows));
  k::rms_norm_forward(x.data(), wp, eps, rows, d, y.data(), rstd.data());
  // y = x in place, and the weight a row of x.
  if (rows > 0 && d > 0) {
    std::vector<T> xy = x;
    const std::vector<T> w_row(x.begin() + wrow * d, x.begin() + (wrow + 1) * d);
    std::vector<T> y_ref(static_cast<std::size_t>(n));
    std::vector<C> r2(static_cast<std::size_t>(rows));
    k::rms_norm_forward(x.data(), w_row.data(), eps, rows, d, y_ref.data(), r2.data());
    k::rms_norm_forward(xy.data(), xy.data() + wrow * d, eps, rows, d, xy.data(), r2.data(), run);
    if (!same_bits(xy, y_ref)) finding("rms_norm: y = x with the weight in x differs");
  }
  // The fused add, h = residual in place, the weight a row of residual.
  if (rows > 0 && d > 0) {
    const std::vector<T> w_row(res.begin() + wrow * d, res.begin() + (wrow + 1) * d);
    std::vector<T> y_ref(static_cast<std::size_t>(n)), h_ref(static_cast<std::size_t>(n));
    std::vector<C> r_ref(static_cast<std::size_t>(rows)), r2(static_cast<std::size_t>(rows));
    k::add_rms_norm_forward(x.data(), res.data(), w_row.data(), eps, rows, d, y_ref.data(), h_ref.data(),
                            r_ref.data());
    std::vector<T> h = res, y2(static_cast<std::size_t>(n));
    k::add_rms_norm_forward(x.data(), h.data(), h.data() + wrow * d, eps, rows, d, y2.data(), h.data(),
                            r2.data(), run);
    if (!same_bits(h, h_ref) || !same_bits(y2, y_ref) || !same_bits(r2, r_ref))
      finding("add_rms_norm_: the weight in residual differs");
    // h is the rounded sum, and y is rms_norm(h).
    std::vector<T> y3(static_cast<std::size_t>(n));
    k::rms_norm_forward(h_ref.data(), w_row.data(), eps, rows, d, y3.data(), r2.data());
    if (!same_bits(y3, y_ref)) finding("add_rms_norm is not rms_norm of the rounded sum");
  }
  // Backward: separate, then dx = dy in place with the weight a row of dy.
  std::vector<T> dx(static_cast<std::size_t>(n));
  std::vector<C> dw(static_cast<std::size_t>(d));
  k::rms_norm_backward(dy.data(), x.data(), wp, rstd.data(), rows, d, dx.data(),
                       with_weight ? dw.data() : nullptr);
  if (rows > 0 && d > 0) {
    const std::vector<T> w_row(dy.begin() + wrow * d, dy.begin() + (wrow + 1) * d);
    std::vector<T> dx_ref(static_cast<std::size_t>(n)), g = dy;
    std::vector<C> dw_ref(static_cast<std::size_t>(d)), dw2(static_cast<std::size_t>(d));
    k::rms_norm_backward(dy.data(), x.data(), w_row.data(), rstd.data(), rows, d, dx_ref.data(),
                         dw_ref.data());
    k::rms_norm_backward(g.data(), x.data(), g.data() + wrow * d, rstd.data(), rows, d, g.data(), dw2.data(),
                         run);
    if (!same_bits(g, dx_ref) || !same_bits(dw2, dw_ref))
      finding("rms_norm backward: dx = dy aliasing differs");
  }
  // Finite, modest rows: the forward within the documented error of a long double reference.
  if (finite && rows > 0 && d > 0 && eps > 0) {
    for (std::int64_t r = 0; r < rows; ++r) {
      long double ss = 0;
      for (std::int64_t j = 0; j < d; ++j) {
        const long double v = tierkit::load_compute(&x[static_cast<std::size_t>(r * d + j)]);
        ss += v * v;
      }
      const long double rs = 1.0L / std::sqrt(ss / d + static_cast<long double>(static_cast<C>(eps)));
      for (std::int64_t j = 0; j < d; ++j) {
        const long double wv = with_weight ? tierkit::load_compute(&w[static_cast<std::size_t>(j)]) : 1.0L;
        const long double want = tierkit::load_compute(&x[static_cast<std::size_t>(r * d + j)]) * rs * wv;
        const long double got = tierkit::load_compute(&y[static_cast<std::size_t>(r * d + j)]);
        // 16-bit: one rounding of a float-accurate value (2 units of the
        // type at |want|); float/double: a few units of the compute type.
        const long double unit = sizeof(T) == 2 ? (std::is_same_v<T, Half> ? 0x1p-10L : 0x1p-7L)
                                                : static_cast<long double>(std::numeric_limits<C>::epsilon());
        const long double tol = unit * 16 * (std::fabs(want) + 1e-3L * std::fabs(wv) + 1e-30L);
        if (std::fabs(got - want) > tol) finding("rms_norm differs from the long double reference");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tierkit_fuzz::Input in(data, size);
  switch (in.in(0, 3)) {
    case 0: check<float>(in); break;
    case 1: check<double>(in); break;
    case 2: check<Half>(in); break;
    default: check<BFloat16>(in); break;
  }
  return 0;
}
