"""Cross-tier tests: the tiers together, as a user strings them."""

import os

from hypothesis import HealthCheck, settings

# Default (CI): 100 examples per (op, dtype) test, so >= 300 per op (3 dtypes
# for the bridge, 4 for torch-cpu; >= 200 per op is the bar). Soak, 2000 per
# test: `pytest tests --hypothesis-profile=soak`.
_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=100, **_common)
settings.register_profile("soak", max_examples=2000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
