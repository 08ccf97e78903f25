// libFuzzer target: core's strided views over arbitrary shapes, strides and
// offsets (what every producer hands the bridge), the out= overlap rule
// against brute force, numpy's broadcast rule against brute force, and the
// pointwise kernels over those layouts against the scalar functor on a
// snapshot of the inputs. A finding: a crash, a sanitizer report, or a
// decision or value that differs from the reference (abort()).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "fuzz_input.h"
#include "tierkit/kernels.h"

namespace {

using tierkit::DType;
using tierkit::Shape;
using tierkit::TensorView;
namespace k = tierkit::kernels;

constexpr std::int64_t kCap = 384;  // elements in the one backing store all views share

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "tierkit fuzz finding: %s\n", what);
  std::abort();
}

struct Layout {
  Shape shape, strides;
  std::int64_t offset = 0;
};

Layout layout(tierkit_fuzz::Input& in, int rank) {
  Layout l;
  for (int d = 0; d < rank; ++d) {
    l.shape.push_back(in.in(0, 5));
    l.strides.push_back(in.in(-9, 9));
  }
  l.offset = in.in(0, kCap - 1);
  return l;
}

// Element offsets (from the store's start) in C order.
std::vector<std::int64_t> offsets(const Layout& l) {
  std::int64_t n = 1;
  for (int d = 0; d < l.shape.rank(); ++d) n *= l.shape[d];
  std::vector<std::int64_t> out;
  std::vector<std::int64_t> index(static_cast<std::size_t>(l.shape.rank()), 0);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t pos = l.offset;
    for (int d = 0; d < l.shape.rank(); ++d) pos += index[static_cast<std::size_t>(d)] * l.strides[d];
    out.push_back(pos);
    for (int d = l.shape.rank() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < l.shape[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

bool in_store(const std::vector<std::int64_t>& offs) {
  for (std::int64_t p : offs)
    if (p < 0 || p >= kCap) return false;
  return true;
}

bool has_internal_overlap(const std::vector<std::int64_t>& offs) {
  std::vector<std::int64_t> s = offs;
  std::sort(s.begin(), s.end());
  return std::adjacent_find(s.begin(), s.end()) != s.end();
}

// The rule: out may be exactly the input or share no element with it at
// another index.
bool brute_allowed(const Layout& out, const std::vector<std::int64_t>& oo, const Layout& in,
                   const std::vector<std::int64_t>& io) {
  std::map<std::int64_t, std::int64_t> at;
  for (std::size_t i = 0; i < oo.size(); ++i) at.emplace(oo[i], static_cast<std::int64_t>(i));
  const bool same_shape = out.shape == in.shape;
  for (std::size_t j = 0; j < io.size(); ++j) {
    const auto it = at.find(io[j]);
    if (it == at.end()) continue;
    if (!same_shape) return false;
    // out's element j at that address too? (out may hold an address twice)
    if (oo[j] != io[j]) return false;
  }
  return true;
}

template <typename T>
bool same_value(const T& a, const T& b) {
  const auto fa = tierkit::load_compute(&a), fb = tierkit::load_compute(&b);
  if (std::isnan(fa) && std::isnan(fb)) return true;  // a NaN's sign is unspecified (kernels.h)
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
void check_op(tierkit_fuzz::Input& in, int op, const Layout& lo, const Layout& la, const Layout& lb) {
  using C = tierkit::compute_t<T>;
  std::vector<T> store(kCap);
  for (auto& v : store) in.bits(&v, sizeof(T));
  const double alpha = static_cast<double>(in.in(-8, 8)) / 4, beta = static_cast<double>(in.in(-8, 8)) / 4;
  const DType dt = tierkit::dtype_of_v<T>;
  TensorView out, a, b;
  try {
    out = TensorView(store.data(), kCap, dt, lo.shape, lo.strides, lo.offset);
    a = TensorView(store.data(), kCap, dt, la.shape, la.strides, la.offset);
    b = TensorView(store.data(), kCap, dt, la.shape, lb.strides, lb.offset);
  } catch (const tierkit::Error&) {
    const bool fits = in_store(offsets(lo)) && in_store(offsets(la)) &&
                      in_store(offsets(Layout{la.shape, lb.strides, lb.offset}));
    if (fits) finding("a view inside the store was refused");
    return;
  }
  const Layout lb2{la.shape, lb.strides, lb.offset};
  const auto oo = offsets(lo), ao = offsets(la), bo = offsets(lb2);
  if (!in_store(oo) || !in_store(ao) || !in_store(bo))
    finding("a view reaching outside the store was accepted");
  const std::vector<T> snapshot = store;
  const bool unary = op == 3;
  bool expect_ok = lo.shape == la.shape;
  for (int d = 0; d < lo.shape.rank() && oo.size() > 1; ++d)
    if (lo.shape[d] > 1 && lo.strides[d] == 0) expect_ok = false;  // writable_layout
  if (expect_ok) expect_ok = brute_allowed(lo, oo, la, ao) && (unary || brute_allowed(lo, oo, lb2, bo));
  bool ok = true;
  try {
    switch (op) {
      case 0: k::add(a, b, out); break;
      case 1: k::mul(a, b, out); break;
      case 2: k::silu_mul(a, b, out); break;
      case 3: k::scale_shift(a, alpha, beta, out); break;
      default: k::muladd(a, b, alpha, out); break;
    }
  } catch (const tierkit::Error&) {
    ok = false;
  }
  if (ok != expect_ok) finding(ok ? "an overlapping out= was accepted" : "an allowed out= was refused");
  if (!ok) {
    if (std::memcmp(store.data(), snapshot.data(), store.size() * sizeof(T)) != 0)
      finding("a refused call wrote");
    return;
  }
  if (has_internal_overlap(oo)) return;  // which write lands last is the loop's order: no value to check
  for (std::size_t i = 0; i < oo.size(); ++i) {
    const C x = tierkit::load_compute(&snapshot[static_cast<std::size_t>(ao[i])]);
    const C y = unary ? C(0) : tierkit::load_compute(&snapshot[static_cast<std::size_t>(bo[i])]);
    C r;
    switch (op) {
      case 0: r = k::AddOp<C>{}(x, y); break;
      case 1: r = k::MulOp<C>{}(x, y); break;
      case 2: r = k::SiluMulOp<C>{}(x, y); break;
      case 3: r = k::ScaleShiftOp<C>{static_cast<C>(alpha), static_cast<C>(beta)}(x); break;
      default: r = k::MulAddOp<C>{static_cast<C>(alpha)}(x, y); break;
    }
    T want;
    tierkit::store_compute(&want, r);
    if (!same_value(store[static_cast<std::size_t>(oo[i])], want)) finding("a pointwise value differs");
  }
  // Nothing outside out was written.
  std::vector<bool> written(kCap, false);
  for (std::int64_t p : oo) written[static_cast<std::size_t>(p)] = true;
  for (std::int64_t p = 0; p < kCap; ++p)
    if (!written[static_cast<std::size_t>(p)] &&
        std::memcmp(&store[static_cast<std::size_t>(p)], &snapshot[static_cast<std::size_t>(p)], sizeof(T)) !=
            0)
      finding("an element outside out was written");
}

void check_broadcast(const Layout& a, const Layout& b) {
  std::vector<std::int64_t> sa(a.shape.begin(), a.shape.end()), sb(b.shape.begin(), b.shape.end());
  const std::size_t rank = std::max(sa.size(), sb.size());
  std::vector<std::int64_t> want(rank);
  bool ok = true;
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t x = k + sa.size() < rank ? 1 : sa[k + sa.size() - rank];
    const std::int64_t y = k + sb.size() < rank ? 1 : sb[k + sb.size() - rank];
    if (x != y && x != 1 && y != 1) ok = false;
    want[k] = x == 1 ? y : x;
  }
  try {
    const auto got = tierkit::checks::broadcast_shape("b", sa, "a", sb);
    if (!ok || got != want) finding("broadcast_shape differs from numpy's rule");
  } catch (const tierkit::Error&) {
    if (ok) finding("broadcast_shape refused shapes numpy broadcasts");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tierkit_fuzz::Input in(data, size);
  const int dtype = static_cast<int>(in.in(0, 3)), op = static_cast<int>(in.in(0, 4));
  const int rank = static_cast<int>(in.in(0, 4));
  const Layout lo = layout(in, rank), la = layout(in, in.flag() ? rank : static_cast<int>(in.in(0, 4)));
  const Layout lb = layout(in, la.shape.rank());
  check_broadcast(lo, la);
  switch (dtype) {
    case 0: check_op<float>(in, op, lo, la, lb); break;
    case 1: check_op<double>(in, op, lo, la, lb); break;
    case 2: check_op<tierkit::Half>(in, op, lo, la, lb); break;
    default: check_op<tierkit::BFloat16>(in, op, lo, la, lb); break;
  }
  return 0;
}
