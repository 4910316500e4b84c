#!/usr/bin/env python3
"""Memory-tight pipelines: each offload policy and `auto`, against the lower bound.

Compiles every profile of bench/profiles/tight-memory/ (their README says how each was made) with
`optpipe-compile PROFILE --method M --threads 1 --summary-json -` for each method M of METHODS,
one compile at a time, and prints a markdown table on stdout: each method's makespan ("does not
fit" where it exits 3, no schedule within the budget), the lower bound and what decides it, auto's
gap to the bound, auto's makespan over the best policy's (the best of the methods other than
`auto` that fit), and for reference 1F1B's makespan without a budget (`--method 1f1b
--memory-budget 1024TiB`: none of these budgets holds 1F1B). Progress and each compile's wall
seconds go to stderr. An auto makespan marked "(time limit)" is one that optpipe-compile's
--time-limit (default 60 s; --time-limit here passes another) cut short: it depends on the
machine.

    python3 tools/tight_memory_bench.py                      # every case, --effort 1
    python3 tools/tight_memory_bench.py --only gpt-R8-m32-link21-b33 --effort 0.5

Every policy in METHODS is in auto's portfolio, so auto should never be slower than the best of
them. Exit status: 0 when auto fits and is within RATIO_TOLERANCE of the best policy on every
row; 1, after the table, when it is not (the rows and the command to reproduce are named on
stderr; --no-fail: exit 0 all the same); 2 on a usage or setup error or a compile that failed
otherwise than by not fitting.

Python 3 standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE_DIR = os.path.join(REPO, "bench", "profiles", "tight-memory")

# The cases, in table order (file names in PROFILE_DIR without ".json").
CASES = [
    "coarse-r6-m24",
    "coarse-r16-m64",
    "coarse-r32-m64",
    "gpt-R8-m32-link21-b33",
    "gpt-R8-m32-link21-b50",
    "gpt-R8-m32-link50-b33",
    "gpt-R8-m32-link50-b50",
    "gpt-R16-m32-link21-b33",
]

# The offload policies compared, then auto (which runs each of them, and more, then optimises).
POLICIES = ["paced-offload", "adaoffload", "pipeoffload", "zb-auto"]
METHODS = POLICIES + ["auto"]

# 1F1B's makespan with memory out of the way (the largest size a budget takes, 2^50 bytes).
UNBOUNDED_BUDGET = "1024TiB"

EXIT_DOES_NOT_FIT = 3  # optpipe-compile: no schedule fits the memory budget (docs/cli.md)

# auto / best policy above this counts as slower: makespans are printed to 0.1 ms.
RATIO_TOLERANCE = 1.0005


def die(message):
    print(f"tight_memory_bench: error: {message}", file=sys.stderr)
    sys.exit(2)


def compile_command(compiler, profile, method, effort, out, time_limit=None, budget=None):
    command = [compiler, profile, "--method", method, "--threads", "1", "--effort", f"{effort:g}",
               "--summary-json", "-", "-o", out]
    if budget is not None:
        command += ["--memory-budget", budget]
    if time_limit is not None:
        command += ["--time-limit", time_limit]
    return command


def run_compile(compiler, profile, method, effort, time_limit, scratch, budget=None):
    """One compile: (summary dict or None where it does not fit, wall seconds)."""
    out = os.path.join(scratch, f"{method}.schedule.json")
    command = compile_command(compiler, profile, method, effort, out, time_limit, budget)
    start = time.monotonic()
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.monotonic() - start
    if proc.returncode == EXIT_DOES_NOT_FIT:
        return None, seconds
    if proc.returncode != 0:
        die(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr.strip()}")
    try:
        summary = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        die(f"{' '.join(command)}: summary is not JSON ({e})")
    if not summary.get("feasible", False):
        return None, seconds
    return summary, seconds


def fmt_ms(value):
    return f"{value:.1f}"


def main():
    parser = argparse.ArgumentParser(
        description="Compile the memory-tight profiles of bench/profiles/tight-memory/ with each "
                    "offload policy and auto; print a markdown table of makespans and lower "
                    "bounds.")
    parser.add_argument("--bin", default=os.path.join(REPO, "build", "bin"),
                        help="folder holding optpipe-compile (default: build/bin)")
    parser.add_argument("--only", action="append", metavar="NAME", choices=CASES,
                        help="run this case only (repeatable): " + ", ".join(CASES))
    parser.add_argument("--effort", type=float, default=1.0,
                        help="optpipe-compile --effort for every compile (default 1)")
    parser.add_argument("--time-limit", metavar="SEC",
                        help="optpipe-compile --time-limit for every compile (default: the "
                             "compiler's, 60 s; inf: none)")
    parser.add_argument("--no-fail", action="store_true",
                        help="exit 0 even where auto is slower than a policy")
    args = parser.parse_args()

    compiler = os.path.join(args.bin, "optpipe-compile")
    if not os.access(compiler, os.X_OK):
        die(f"{compiler} not found or not executable; build first or pass --bin")
    if args.effort <= 0:
        die("--effort must be > 0")
    cases = args.only or CASES
    for name in cases:
        if not os.path.isfile(os.path.join(PROFILE_DIR, name + ".json")):
            die(f"missing profile {os.path.join(PROFILE_DIR, name + '.json')}")

    rows = []
    slower = []
    total_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tight_memory_bench.") as scratch:
        for name in cases:
            profile = os.path.join(PROFILE_DIR, name + ".json")
            results = {}
            for method in METHODS:
                summary, seconds = run_compile(compiler, profile, method, args.effort,
                                               args.time_limit, scratch)
                results[method] = (summary, seconds)
                shown = fmt_ms(summary["makespan"]) if summary else "does not fit"
                print(f"{name:<26} {method:<14} {shown:>13}  {seconds:7.1f} s",
                      file=sys.stderr, flush=True)
            unbounded, seconds = run_compile(compiler, profile, "1f1b", args.effort,
                                             args.time_limit, scratch, UNBOUNDED_BUDGET)
            if unbounded is None:
                die(f"{name}: 1f1b does not fit --memory-budget {UNBOUNDED_BUDGET}")
            results["1f1b"] = (unbounded, seconds)
            print(f"{name:<26} {'1f1b (no budget)':<14} {fmt_ms(unbounded['makespan']):>13}  "
                  f"{seconds:7.1f} s", file=sys.stderr, flush=True)
            rows.append((name, results))
    total_seconds = time.monotonic() - total_start

    header = (["profile"] + [f"`{m}`" for m in POLICIES] +
              ["`auto`", "auto (s)", "lower bound (source)", "auto gap", "auto / best policy",
               "1F1B, no budget"])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, results in rows:
        cells = [name]
        for method in POLICIES:
            summary = results[method][0]
            cells.append(fmt_ms(summary["makespan"]) if summary else "does not fit")
        auto, auto_seconds = results["auto"]
        fitting = [results[m][0]["makespan"] for m in POLICIES if results[m][0]]
        best = min(fitting) if fitting else None
        if auto:
            bound = auto["lower_bound"]
            solver = auto.get("solver") or {}
            capped = " (time limit)" if solver.get("stop_reason") == "time_limit" else ""
            cells += [fmt_ms(auto["makespan"]) + capped, f"{auto_seconds:.1f}",
                      f"{fmt_ms(bound)} ({auto['lower_bound_source']})",
                      f"{100 * (auto['makespan'] / bound - 1):.1f}%" if bound > 0 else "",
                      f"{auto['makespan'] / best:.3f}" if best else "no policy fits"]
            if best and auto["makespan"] > best * RATIO_TOLERANCE:
                slower.append((name, auto["makespan"], best))
        else:
            cells += ["does not fit", f"{auto_seconds:.1f}", "", "", ""]
            if best:
                slower.append((name, None, best))
        cells.append(fmt_ms(results["1f1b"][0]["makespan"]))
        print("| " + " | ".join(cells) + " |")

    compiles = len(rows) * (len(METHODS) + 1)
    print(f"tight_memory_bench: {compiles} compiles in {total_seconds:.1f} s at --effort "
          f"{args.effort:g}, --threads 1", file=sys.stderr)
    for name, auto_makespan, best in slower:
        profile = os.path.relpath(os.path.join(PROFILE_DIR, name + ".json"))
        command = " ".join(compile_command(os.path.relpath(compiler), profile, "auto",
                                           args.effort, f"{name}.schedule.json", args.time_limit))
        what = f"{auto_makespan:.1f}" if auto_makespan is not None else "no schedule"
        print(f"tight_memory_bench: {name}: auto gives {what}, slower than the best policy "
              f"({best:.1f}): {command}", file=sys.stderr)
    if slower and not args.no_fail:
        sys.exit(1)


if __name__ == "__main__":
    main()
