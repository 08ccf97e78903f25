"""Every bad input the tiers refuse (tests/bad_inputs.py): the right exception,
a message naming the argument, and — each case in a subprocess — no crash."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bad_inputs import all_cases

CASES = all_cases()
IDS = [c[0] for c in CASES]

RUNNER = """
import json, re, sys
sys.path.insert(0, {here!r})
from bad_inputs import all_cases
cases = {{c[0]: c for c in all_cases()}}
for case_id in sys.argv[1:]:
    _, call, exc, pattern = cases[case_id]
    try:
        call()
        result = "no exception"
    except exc as e:
        result = "ok" if re.search(pattern, str(e)) else "message: " + str(e)[:200]
    except BaseException as e:
        result = "wrong type: " + type(e).__name__
    print(json.dumps([case_id, result]), flush=True)
"""


def test_catalogue_has_at_least_40_distinct_cases():
    assert len(CASES) >= 40 and len(set(IDS)) == len(IDS)
    assert any(i.startswith("bridge-") for i in IDS) and any(i.startswith("torch-") for i in IDS)


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=IDS)
def test_refused_with_a_clear_message(call, exc, pattern):
    with pytest.raises(exc) as info:
        call()
    assert re.search(pattern, str(info.value)), str(info.value)


def test_no_case_crashes_the_process():
    """Each case again, in child processes that must exit normally. One child
    per tier keeps imports cheap; every case reports before the next starts,
    so a crash would name the case that caused it."""
    for prefix in ("bridge-", "torch-"):
        ids = [i for i in IDS if i.startswith(prefix)]
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER.format(here=str(Path(__file__).parent)), *ids],
            capture_output=True,
            text=True,
            timeout=600,
        )
        reported = dict(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("["))
        missing = [i for i in ids if i not in reported]
        assert proc.returncode == 0 and not missing, (
            f"child exited {proc.returncode}; first case without a report: {missing[:1]}\n{proc.stderr[-2000:]}"
        )
        assert all(v == "ok" for v in reported.values()), {k: v for k, v in reported.items() if v != "ok"}
