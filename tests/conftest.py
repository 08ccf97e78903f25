"""Cross-tier tests: the tiers together, as a user strings them."""

import os

from hypothesis import HealthCheck, settings

# Default (CI): >= 200 examples per op. Soak: `pytest tests --hypothesis-profile=soak`.
_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=200, **_common)
settings.register_profile("soak", max_examples=2000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
