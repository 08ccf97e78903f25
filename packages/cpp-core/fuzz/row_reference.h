// A row in long double, for evaluating an op-table row entry's own formulas
// (tierkit::row_info::<name>::reference) as the fuzzers' reference: the
// arithmetic the formulas use (+ - * / between rows and scalars) and the
// functions they call (row_mean, row_total, row_max, rsqrt, exp, log;
// row_sum is the parameters' and a single row's is itself).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace tierkit_fuzz {

struct LRow {
  std::vector<long double> v;
};

template <typename Op>
LRow zip(const LRow& a, const LRow& b, Op op) {
  LRow r{std::vector<long double>(a.v.size())};
  for (std::size_t i = 0; i < a.v.size(); ++i) r.v[i] = op(a.v[i], b.v[i]);
  return r;
}
template <typename Op>
LRow map(const LRow& a, Op op) {
  LRow r{a.v};
  for (long double& e : r.v) e = op(e);
  return r;
}

inline LRow operator+(const LRow& a, const LRow& b) {
  return zip(a, b, [](auto p, auto q) { return p + q; });
}
inline LRow operator-(const LRow& a, const LRow& b) {
  return zip(a, b, [](auto p, auto q) { return p - q; });
}
inline LRow operator*(const LRow& a, const LRow& b) {
  return zip(a, b, [](auto p, auto q) { return p * q; });
}
inline LRow operator/(const LRow& a, const LRow& b) {
  return zip(a, b, [](auto p, auto q) { return p / q; });
}
inline LRow operator+(const LRow& a, long double s) {
  return map(a, [s](auto p) { return p + s; });
}
inline LRow operator-(const LRow& a, long double s) {
  return map(a, [s](auto p) { return p - s; });
}
inline LRow operator*(const LRow& a, long double s) {
  return map(a, [s](auto p) { return p * s; });
}
inline LRow operator+(long double s, const LRow& a) { return a + s; }
inline LRow operator*(long double s, const LRow& a) { return a * s; }
inline LRow operator-(long double s, const LRow& a) {
  return map(a, [s](auto p) { return s - p; });
}

struct LRowFunctions {
  LRow row_mean(const LRow& a) const {
    long double s = 0;
    for (long double e : a.v) s += e;
    return LRow{std::vector<long double>(a.v.size(), a.v.empty() ? 0.0L : s / a.v.size())};
  }
  LRow row_total(const LRow& a) const {
    long double s = 0;
    for (long double e : a.v) s += e;
    return LRow{std::vector<long double>(a.v.size(), s)};
  }
  LRow row_max(const LRow& a) const {
    long double m = -INFINITY;
    for (long double e : a.v) m = std::fmax(m, e);
    return LRow{std::vector<long double>(a.v.size(), m)};
  }
  LRow row_sum(const LRow& a) const { return a; }
  LRow exp(const LRow& a) const {
    return map(a, [](auto p) { return std::exp(p); });
  }
  LRow log(const LRow& a) const {
    return map(a, [](auto p) { return std::log(p); });
  }
  LRow rsqrt(const LRow& a) const {
    return map(a, [](auto p) { return 1.0L / std::sqrt(p); });
  }
};

}  // namespace tierkit_fuzz
