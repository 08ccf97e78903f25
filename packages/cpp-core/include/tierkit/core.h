// Everything in tierkit core, for consumers who want one include.
#pragma once

#include "tierkit/buffer.h"
#include "tierkit/caching_allocator.h"
#include "tierkit/checks.h"
#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/file.h"
#include "tierkit/huge_pages.h"
#include "tierkit/kernels.h"
#include "tierkit/parallel.h"
#include "tierkit/row_functors.h"
#include "tierkit/scope_guard.h"
#include "tierkit/view.h"
