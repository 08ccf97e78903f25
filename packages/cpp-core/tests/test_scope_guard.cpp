#include <gtest/gtest.h>

#include <stdexcept>

#include "tierkit/scope_guard.h"

TEST(ScopeGuard, RunsOnScopeExit) {
  int runs = 0;
  {
    auto g = tierkit::on_exit([&] { ++runs; });
  }
  EXPECT_EQ(runs, 1);
}

TEST(ScopeGuard, RunsWhenUnwinding) {
  int runs = 0;
  try {
    auto g = tierkit::on_exit([&] { ++runs; });
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(runs, 1);
}

TEST(ScopeGuard, DismissSkipsCleanup) {
  int runs = 0;
  {
    auto g = tierkit::on_exit([&] { ++runs; });
    g.dismiss();
  }
  EXPECT_EQ(runs, 0);
}

TEST(ScopeGuard, MovedGuardRunsOnce) {
  int runs = 0;
  {
    auto g = tierkit::on_exit([&] { ++runs; });
    auto h = std::move(g);
  }
  EXPECT_EQ(runs, 1);
}
