// libFuzzer target: core's row kernels for every row reduction of the op
// table (each TIERKIT_ROW_REDUCTIONS entry; forward, backward,
// the fused add where the entry has one) over arbitrary row counts, lengths,
// values (any bit pattern) and aliasing (y = x, h = residual, dx = dy, the
// weight inside an output), each against the same kernel on separate copies
// of its inputs (bit for bit: the kernels' order is fixed), and finite rows
// of modest size against the entry's own formula in long double
// (row_info::<name>::reference). A finding: a crash, a sanitizer report, or
// a value that differs (abort()).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "fuzz_input.h"
#include "row_reference.h"
#include "tierkit/op_table.h"
#include "tierkit/row_functors.h"

namespace {

using tierkit::BFloat16;
using tierkit::Half;
namespace k = tierkit::kernels;

#define TIERKIT_COUNT_ROWS(NAME, FUNCTOR, P, S) +1
constexpr int kEntries = 0 TIERKIT_ROW_REDUCTIONS(TIERKIT_COUNT_ROWS);
#undef TIERKIT_COUNT_ROWS

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
using Vec = std::vector<T>;

// The entry's parameters from `in` (each present or not); p[0] is the weight.
template <typename T>
struct Params {
  std::vector<Vec<T>> values;
  std::vector<bool> present;
  k::RowParams<T> with(const T* first) const {
    const T* w = !present.empty() && present[0] ? first : nullptr;
    const T* b = present.size() > 1 && present[1] ? values[1].data() : nullptr;
    return {w, b};
  }
  k::RowParams<T> get() const { return with(values.empty() ? nullptr : values[0].data()); }
};

template <typename Info, typename K, typename T>
void check(tierkit_fuzz::Input& in) {
  using C = tierkit::compute_t<T>;
  constexpr std::size_t P = Info::params.size();
  const std::string name = Info::name;
  auto fail = [&](const char* what) {
    const std::string m = name + ": " + what;
    finding(m.c_str());
  };
  const std::int64_t rows = in.in(0, 40), d = in.in(0, 600), n = rows * d;
  const auto N = static_cast<std::size_t>(n), R = static_cast<std::size_t>(rows * K::kStats),
             D = static_cast<std::size_t>(d);
  const bool finite = in.flag();
  const double eps = in.flag() ? 1e-6 : 0.0;
  const auto x = values<T>(in, N, finite);
  const auto res = values<T>(in, N, finite);
  const auto dy = values<T>(in, N, finite);
  const ReverseRunner run{in.in(1, 7)};
  const std::int64_t wrow = rows ? in.in(0, rows - 1) : 0;
  Params<T> params;
  for (std::size_t i = 0; i < P; ++i) {
    params.present.push_back(in.flag());
    params.values.push_back(values<T>(in, D, finite));
  }
  // A row of `a` as the weight, the other parameters as drawn.
  auto row_of = [&](const Vec<T>& a) { return Vec<T>(a.begin() + wrow * d, a.begin() + (wrow + 1) * d); };

  // Forward with separate buffers: the reference for every aliased form.
  Vec<T> y(N);
  Vec<C> stats(R);
  k::row_forward<K>(x.data(), params.get(), eps, rows, d, y.data(), stats.data());
  // y = x in place, and the weight a row of x.
  if (rows > 0 && d > 0) {
    Vec<T> xy = x, y_ref(N);
    const Vec<T> w_row = row_of(x);
    Vec<C> s2(R);
    k::row_forward<K>(x.data(), params.with(w_row.data()), eps, rows, d, y_ref.data(), s2.data());
    k::row_forward<K>(xy.data(), params.with(xy.data() + wrow * d), eps, rows, d, xy.data(), s2.data(), run);
    if (!same_bits(xy, y_ref)) fail("y = x with the weight in x differs");
  }
  // The fused add, h = residual in place, the weight a row of residual.
  if constexpr (Info::fused_add) {
    if (rows > 0 && d > 0) {
      const Vec<T> w_row = row_of(res);
      Vec<T> y_ref(N), h_ref(N);
      Vec<C> s_ref(R), s2(R);
      k::row_add_forward<K>(x.data(), res.data(), params.with(w_row.data()), eps, rows, d, y_ref.data(),
                            h_ref.data(), s_ref.data());
      Vec<T> h = res, y2(N);
      k::row_add_forward<K>(x.data(), h.data(), params.with(h.data() + wrow * d), eps, rows, d, y2.data(),
                            h.data(), s2.data(), run);
      if (!same_bits(h, h_ref) || !same_bits(y2, y_ref) || !same_bits(s2, s_ref))
        fail("the fused add in place with the weight in residual differs");
      // h is the rounded sum, and y is the norm of h.
      Vec<T> y3(N);
      k::row_forward<K>(h_ref.data(), params.with(w_row.data()), eps, rows, d, y3.data(), s2.data());
      if (!same_bits(y3, y_ref)) fail("the fused add is not the norm of the rounded sum");
    }
  }
  // A float32 y over 16-bit x (core's kWideOutput: casting_mode "llama"
  // with a float32 weight): x-hat as the kind rounds it without a weight,
  // times the weight in float, not rounded again; the stats the same.
  if constexpr (K::kWideOutput && sizeof(T) == 2 && P > 0) {
    if (rows > 0 && d > 0) {
      Vec<C> wc(D), yw(N), want(N), s_hat(R), s_w(R);
      for (std::size_t j = 0; j < D; ++j) wc[j] = tierkit::load_compute(&params.values[0][j]);
      Vec<T> xhat(N);
      k::row_forward<K>(x.data(), k::RowParams<T>{}, eps, rows, d, xhat.data(), s_hat.data());
      k::RowParams<C> pw{wc.data(), nullptr};
      pw.round_normalized = true;
      k::row_forward<K>(x.data(), pw, eps, rows, d, yw.data(), s_w.data(), run);
      for (std::size_t i = 0; i < N; ++i) want[i] = tierkit::load_compute(&xhat[i]) * wc[i % D];
      if (!same_bits(yw, want) || !same_bits(s_w, s_hat)) fail("the float32 y is not x-hat times the weight");
    }
  }
  // Backward: separate, then dx = dy in place with the weight a row of dy.
  if (rows > 0 && d > 0) {
    const Vec<T> w_row = row_of(dy);
    const k::RowParams<T> p = params.with(w_row.data());
    Vec<T> dx_ref(N), g = dy;
    Vec<C> dw_ref(D), db_ref(D), dw2(D), db2(D);
    C* db = P > 1 ? db_ref.data() : nullptr;
    C* dw = P > 0 ? dw_ref.data() : nullptr;
    k::row_backward<K>(dy.data(), x.data(), p, stats.data(), rows, d, dx_ref.data(), dw, db);
    k::row_backward<K>(g.data(), x.data(), params.with(g.data() + wrow * d), stats.data(), rows, d, g.data(),
                       P > 0 ? dw2.data() : nullptr, P > 1 ? db2.data() : nullptr, run);
    if (!same_bits(g, dx_ref) || !same_bits(dw2, dw_ref) || (P > 1 && !same_bits(db2, db_ref)))
      fail("backward with dx = dy aliasing differs");
  }
  // Finite, modest rows: the forward within the documented error of the
  // entry's formula in long double.
  if (finite && rows > 0 && d > 0 && eps > 0) {
    using tierkit_fuzz::LRow;
    const tierkit_fuzz::LRowFunctions f;
    auto lrow = [&](const T* p) {
      LRow r{std::vector<long double>(D)};
      for (std::size_t j = 0; j < D; ++j) r.v[j] = tierkit::load_compute(p + j);
      return r;
    };
    const k::RowParams<T> p = params.get();
    const LRow ones{std::vector<long double>(D, 1.0L)}, zeros{std::vector<long double>(D, 0.0L)};
    const LRow w = p.w ? lrow(p.w) : ones, b = p.b ? lrow(p.b) : zeros;
    const long double e = static_cast<C>(eps);
    // 16-bit: one rounding of a float-accurate value (2 units of the type);
    // float/double: a few units of the compute type.
    const long double unit = sizeof(T) == 2 ? (std::is_same_v<T, Half> ? 0x1p-10L : 0x1p-7L)
                                            : static_cast<long double>(std::numeric_limits<C>::epsilon());
    for (std::int64_t r = 0; r < rows; ++r) {
      const LRow xr = lrow(&x[static_cast<std::size_t>(r * d)]);
      const LRow want = Info::reference(f, xr, w, b, e);
      // The normalised row's largest magnitude bounds the cancellation in it
      // (a mean-centred kind's x - mean): the error of each element is a few units of
      // it, scaled by that element's weight, plus its own rounding.
      const LRow xhat = Info::reference(f, xr, 1.0L, 0.0L, e);
      long double scale = 0;
      for (long double v : xhat.v) scale = std::fmax(scale, std::fabs(v));
      for (std::size_t j = 0; j < D; ++j) {
        const long double got = tierkit::load_compute(&y[static_cast<std::size_t>(r) * D + j]);
        const long double tol =
            unit * 16 * (std::fabs(want.v[j]) + scale * std::fabs(w.v[j]) + std::fabs(b.v[j]) + 1e-30L);
        if (!(std::fabs(got - want.v[j]) <= tol)) fail("differs from the entry's formula in long double");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tierkit_fuzz::Input in(data, size);
  // Each entry of the table, then a dtype: a new entry is fuzzed with no new code.
  int entry = 0;
  const int which = static_cast<int>(in.in(0, kEntries - 1));
  const int dtype = static_cast<int>(in.in(0, 3));
#define TIERKIT_FUZZ_ROWS(NAME, FUNCTOR, P, S)      \
  if (entry++ == which) {                           \
    using Info = tierkit::row_info::NAME;           \
    using K = tierkit::kernels::FUNCTOR;            \
    switch (dtype) {                                \
      case 0: check<Info, K, float>(in); break;     \
      case 1: check<Info, K, double>(in); break;    \
      case 2: check<Info, K, Half>(in); break;      \
      default: check<Info, K, BFloat16>(in); break; \
    }                                               \
  }
  TIERKIT_ROW_REDUCTIONS(TIERKIT_FUZZ_ROWS)
#undef TIERKIT_FUZZ_ROWS
  return 0;
}
