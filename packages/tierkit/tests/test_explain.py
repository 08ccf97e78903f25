"""`tierkit doctor explain` on real failure logs: tests/fixtures/logs, made by
fixtures/make_fixtures.py breaking real builds on this machine, and
tests/fixtures/real_logs, copied from public issue threads (manifest.json
says where from and what the thread found the cause to be)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tierkit.doctor.explain import explain

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from make_fixtures import EXPECTED

LOGS = Path(__file__).parent / "fixtures" / "logs"
REAL = Path(__file__).parent / "fixtures" / "real_logs"
MANIFEST = json.loads((REAL / "manifest.json").read_text())["logs"]

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
    assert diagnosis.layer == EXPECTED[name], diagnosis
    assert DECISIVE[name] in diagnosis.line, diagnosis.line
    assert diagnosis.fix
    # Nothing decisive before it: the echoes after it ("ninja: build stopped", ...) never win.
    assert "build stopped" not in diagnosis.line and "Error compiling objects" not in diagnosis.line


def test_abi_symbol_is_demangled_when_cxxfilt_exists():
    diagnosis = explain((LOGS / "abi_mismatch.log").read_text())
    if "symbol:" in diagnosis.explanation:
        assert "torch::jit::parseSchemaOrName" in diagnosis.explanation


def test_unknown_log_is_an_answer_that_says_so():
    diagnosis = explain("all good\nnothing to see\n")
    assert diagnosis.layer == "unknown" and not diagnosis.known
    assert diagnosis.line == "" and diagnosis.line_number == 0


def test_unknown_log_quotes_its_first_error_line():
    diagnosis = explain("building\nsomething odd: frobnication failed\nmore\n")
    assert diagnosis.layer == "unknown"
    assert diagnosis.line_number == 2 and "frobnication failed" in diagnosis.line


def test_echo_lines_alone_are_not_a_diagnosis():
    diagnosis = explain(
        "ninja: build stopped: subcommand failed.\nRuntimeError: Error compiling objects for extension\n"
    )
    assert diagnosis.layer == "unknown"


# ---- the public corpus ------------------------------------------------------------------


def test_manifest_describes_every_real_log_once():
    files = [entry["file"] for entry in MANIFEST]
    assert len(files) == len(set(files))
    assert sorted(files) == sorted(p.name for p in REAL.glob("*.log"))
    assert len(files) >= 30
    for entry in MANIFEST:
        assert re.match(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", entry["source"]), entry
        assert entry["cause"].strip() and entry["layer"].strip(), entry


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_real_log_layer_decisive_line_and_fix(entry):
    text = (REAL / entry["file"]).read_text()
    diagnosis = explain(text)
    assert diagnosis.layer == entry["layer"], diagnosis
    assert entry["decisive"] in diagnosis.line, diagnosis.line
    if diagnosis.known:  # the quoted line is the log's own, at the number given
        assert text.splitlines()[diagnosis.line_number - 1].strip() == diagnosis.line
    for words in entry["fix"]:
        assert words in diagnosis.fix, (words, diagnosis.fix)


def test_corpus_covers_the_kinds_issue_27_found_wrong():
    kinds = {entry.get("kind") for entry in MANIFEST}
    for kind in (
        "nvcc vs host compiler",
        "missing CUDA toolkit headers",
        "unsupported GPU architecture at build",
        "compiler killed (memory)",
        "setup.py importing torch under build isolation",
        "extension built before torch was installed",
        "undefined symbol: built for another torch",
        "undefined symbol: another C++ ABI",
    ):
        assert kind in kinds, kind


def test_a_cause_printed_after_its_consequence_wins():
    # Constructed from two real lines (torch_first / abi_old_string_dcnv2): the
    # loader's complaint first, the ABI mismatch it hides later.
    text = (
        "ImportError: libc10.so: cannot open shared object file: No such file or directory\n"
        ">>> import torch\n"
        "ImportError: /home/admin/PassengerRec/DCNv2/_ext.cpython-36m-x86_64-linux-gnu.so: undefined symbol: "
        "_ZN3c105ErrorC1ENS_14SourceLocationERKSs\n"
    )
    diagnosis = explain(text)
    assert diagnosis.layer == "abi" and diagnosis.line_number == 3
    alone = explain(text.splitlines()[0])
    assert alone.layer == "loader" and "import torch before the extension" in alone.fix


def test_a_torch_warning_is_context_not_the_cause():
    warning = (REAL / "cuda_minor_mismatch_warning_only.log").read_text()
    gcc = (REAL / "nvcc_gcc_caffe2.log").read_text()
    diagnosis = explain(warning + gcc)
    assert diagnosis.layer == "cuda-toolchain" and "unsupported GNU version" in diagnosis.line


def test_fixes_quote_the_versions_the_log_states():
    gcc12 = "host_config.h:143:2: error: #error -- unsupported GNU version! gcc versions later than 12 are not supported!"
    assert "gcc 12 or older" in explain(gcc12).fix and "-ccbin g++-12" in explain(gcc12).fix
    arch = explain("nvcc fatal   : Unsupported gpu architecture 'compute_120'")
    assert "compute_120" in arch.fix


def test_a_non_torch_undefined_symbol_stays_a_loader_error():
    # vllm#23925's shape: the project's own function taking an at::Tensor was never compiled.
    line = "ImportError: _C.abi3.so: undefined symbol: _Z24silu_and_mul_nvfp4_quantRN2at6TensorES1_S1_S1_"
    assert explain(line).layer == "loader"


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


def test_cli_explain_missing_file_names_it():
    result = run_cli("explain", "/nonexistent/build.log")
    assert result.returncode == 2 and "/nonexistent/build.log" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_explain_nothing_matched_is_a_clear_answer():
    text = run_cli("explain", "-", stdin="all good\n")
    assert text.returncode == 0 and "nothing matched" in text.stdout
    data = json.loads(run_cli("explain", "-", "--json", stdin="x\nthe frobnicator failed\n").stdout)
    assert (
        data["layer"] == "unknown" and data["line"] == "the frobnicator failed" and data["line_number"] == 2
    )
    assert data["fix"]


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
