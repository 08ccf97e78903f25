"""`tierkit doctor explain` on real failure logs (tests/fixtures/logs, made by
fixtures/make_fixtures.py breaking real builds on this machine)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tierkit.doctor.explain import explain

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from make_fixtures import EXPECTED

LOGS = Path(__file__).parent / "fixtures" / "logs"

# What the quoted decisive line must contain for each fixture.
DECISIVE = {
    "newcomer_build_isolation.log": "No matching distribution found for tierkit-core",
    "newcomer_install_order.log": "No module named 'tierkit_torch'",
    "newcomer_missing_python_h.log": "fatal error: Python.h",
    "newcomer_pytest_other_env.log": "No module named 'tierkit'",
    "compile_syntax_error.log": "error: no match for",
    "compile_missing_header.log": "fatal error: tierkit/does_not_exist.h",
    "link_missing_library.log": "cannot find -lthis_library_does_not_exist",
    "link_undefined_reference.log": "undefined reference to `helper()'",
    "import_undefined_symbol.log": "undefined symbol: _ZN7fixture22declared_never_defined",
    "import_missing_shared_object.log": "cannot open shared object file",
    "abi_mismatch.log": "undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSsb",
    "cuda_arch_list_empty.log": "_get_cuda_arch_flags",
    "cuda_home_unset_wrapper_nvcc.log": "cannot find -lcudart",
    "cuda_version_mismatch.log": "mismatches the version that was used to compile",
    "ninja_missing.log": "Ninja is required",
}


def test_every_fixture_exists():
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_names_the_right_layer_and_the_first_decisive_line(name):
    diagnosis = explain((LOGS / name).read_text())
    assert diagnosis is not None, name
    assert diagnosis.layer == EXPECTED[name], diagnosis
    assert DECISIVE[name] in diagnosis.line, diagnosis.line
    assert diagnosis.fix
    # Nothing decisive before it: the echoes after it ("ninja: build stopped", ...) never win.
    assert "build stopped" not in diagnosis.line and "Error compiling objects" not in diagnosis.line


def test_abi_symbol_is_demangled_when_cxxfilt_exists():
    diagnosis = explain((LOGS / "abi_mismatch.log").read_text())
    if "symbol:" in diagnosis.explanation:
        assert "torch::jit::parseSchemaOrName" in diagnosis.explanation


def test_unknown_log():
    assert explain("all good\nnothing to see\n") is None


def test_echo_lines_alone_are_not_a_diagnosis():
    assert (
        explain(
            "ninja: build stopped: subcommand failed.\nRuntimeError: Error compiling objects for extension\n"
        )
        is None
    )


def run_cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "tierkit", "doctor", *args], input=stdin, capture_output=True, text=True
    )


def test_cli_explain_file_and_stdin():
    log = LOGS / "link_missing_library.log"
    by_file = run_cli("explain", str(log))
    assert by_file.returncode == 1 and "layer: linker" in by_file.stdout
    by_stdin = run_cli("explain", "-", "--json", stdin=log.read_text())
    data = json.loads(by_stdin.stdout)
    assert data["layer"] == "linker" and data["line_number"] > 0


def test_cli_explain_requires_a_file():
    result = run_cli("explain")
    assert result.returncode == 2 and "LOG" in result.stderr


def test_cli_explain_options_in_any_order_and_listed_in_help():
    log = str(LOGS / "ninja_missing.log")
    for args in (("explain", "--json", log), ("explain", log, "--json")):
        result = run_cli(*args)
        assert json.loads(result.stdout)["layer"] == "ninja", args
    assert "explain" in run_cli("--help").stdout


def test_install_order_log_is_not_blamed_on_the_loader():
    diagnosis = explain((LOGS / "newcomer_install_order.log").read_text())
    assert diagnosis.layer == "install-order" and "LD_LIBRARY_PATH" not in diagnosis.fix


def test_an_unloaded_operator_library_is_named():
    text = "RuntimeError: Could not find schema for tierkit::mul.\n"
    diagnosis = explain(text)
    assert diagnosis is not None and diagnosis.layer == "loader" and "tierkit_torch" in diagnosis.fix
