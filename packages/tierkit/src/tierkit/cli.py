"""The `tierkit` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import explain, jit_cache, report, tiers, toolchain, torch_cuda

    if args.doctor_command == "abi":
        from .doctor import abi

        try:
            reports = abi.reports_for(args.target)
        except (FileNotFoundError, RuntimeError) as problem:
            print(f"tierkit doctor abi: {problem}", file=sys.stderr)
            return 2
        print(
            json.dumps([r.as_dict() for r in reports], indent=2)
            if args.json
            else abi.render(reports, args.all)
        )
        return 0

    if args.doctor_command == "explain":
        try:
            text = sys.stdin.read() if args.logfile == "-" else open(args.logfile, errors="replace").read()
        except OSError as problem:
            print(
                f"tierkit doctor explain: LOG {args.logfile!r}: expected a readable file, got: {problem}",
                file=sys.stderr,
            )
            return 2
        diagnosis = explain.explain(text)
        print(json.dumps(diagnosis.as_dict(), indent=2) if args.json else explain.render(diagnosis))
        # 1: a failure was recognised; 0: nothing matched (layer "unknown"); 2: bad usage.
        return 1 if diagnosis.known else 0

    checks = [*toolchain.python_checks(), *toolchain.compiler_checks(), *toolchain.build_tool_checks()]
    info, error = torch_cuda.torch_info()
    checks += torch_cuda.torch_checks(info, error)
    checks += torch_cuda.cuda_checks(info)
    # Each tier is examined in subprocesses of its own (a torch import takes
    # seconds): side by side, reported in the table's order. Measured here:
    # the whole doctor 34 s one tier after another.
    with ThreadPoolExecutor(max_workers=max(1, min(len(tiers.TIERS), os.cpu_count() or 1))) as pool:
        for tier_checks in pool.map(lambda tier: tiers.tier_checks(tier, info), tiers.TIERS):
            checks += tier_checks
    checks += jit_cache.jit_cache_checks(
        fix=args.fix, older_than_min=args.lock_age, torch_lock=(info or {}).get("jit_lock")
    )
    print(report.render_json(checks) if args.json else report.render_text(checks))
    return report.exit_code(checks)


def _bench(args: argparse.Namespace) -> int:
    from .bench import main as bench_main

    return bench_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tierkit", description="tierkit tools")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser(
        "doctor",
        help="can this machine build and load each tier; which layer broke",
        description="Checks the toolchain and every tier in the environment of the Python running it. "
        "`tierkit doctor explain LOG` names the layer a failed build or import broke.",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--fix", action="store_true", help="remove stale JIT lock files (only where this torch's locks block)"
    )
    doctor.add_argument(
        "--lock-age",
        type=float,
        default=10.0,
        metavar="MIN",
        help="a lock nobody holds is stale after this many minutes (default 10)",
    )
    doctor_sub = doctor.add_subparsers(dest="doctor_command", metavar="{explain,abi}")
    explain = doctor_sub.add_parser(
        "explain",
        help="which layer a failed build/import log broke (compile, link, loader, ...), and the fix",
    )
    explain.add_argument("logfile", metavar="LOG", help="the log file, or - for standard input")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    abi = doctor_sub.add_parser(
        "abi",
        help="the torch symbols a library imports: stable C ABI (loads on later torch) or tied to one release",
    )
    abi.add_argument(
        "target", metavar="PATH", help="a .so, a wheel, or an installed tier's name (tierkit-torch)"
    )
    abi.add_argument("--all", action="store_true", help="list every symbol, not the first few")
    abi.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=_doctor, doctor_command=None)

    bench = sub.add_parser("bench", help="the benchmark report")
    bench.add_argument("--quick", action="store_true", help="a one-minute smoke version")
    bench.add_argument("--out", default="bench-results", help="output directory (default bench-results/)")
    bench.add_argument(
        "--cold-builds",
        action="store_true",
        help="also time each torch tier's cold build (minutes of compiling; the stable-ABI section)",
    )
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader left (`tierkit doctor | head`): what it read is all it
        # wanted. Point stdout at /dev/null so Python's exit flush does not
        # raise again, and exit as a process killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
