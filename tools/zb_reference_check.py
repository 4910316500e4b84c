#!/usr/bin/env python3
"""Side-by-side check of optpipe against the public Zero Bubble scheduler code.

Runs the schedulers of the public Zero Bubble repository (sail-sg/zero-bubble-pipeline-parallelism,
checked out by the user into a scratch folder; this script fetches nothing and the repository
holds none of its code) on optpipe's profiles of the Zero Bubble paper's models
(bench/profiles/zero-bubble-paper/), converts each public per-rank order to an optpipe schedule
(timed as soon as possible with optpipe's cost model: an op starts when its rank is free and its
dependency has ended, plus the p2p latency between ranks), checks it with `optpipe validate`, and
prints a markdown table next to what `optpipe-compile` makes of the same profile and budget.

    # once: a checkout of sail-sg/zero-bubble-pipeline-parallelism in a scratch folder, /tmp/zbpub
    python3 tools/zb_reference_check.py --public /tmp/zbpub

Budgets: each public schedule is compared at the nominal budget it was asked for (1F1B's
static + P·A, or half of the activations, static + P·A/2) where its peak fits that; where it does
not (e.g. the runtime's V-Half keeps P + 2 chunk activations), at its own peak instead, static +
its highest per-rank activation bytes, so every row is a budget at which the public method fits.

Exit status: 0 when optpipe's `auto` is at most every public schedule's makespan at the budget of
its row (ratio <= 1.0005); 1, after the table, when it is slower on any row (or finds no schedule
there), the rows named on stderr (--no-fail: exit 0 all the same); 2 on a usage or setup error.

Only the folder megatron/core/pipeline_parallel/zerobubble/scheduler/ of the checkout is used
(graph.py, zb.py, zbv.py, zbv_greedy.py, v_auto_schedule.py); it is imported without running
megatron's package __init__ files. Python 3 standard library only on this side.
"""

import argparse
import contextlib
import datetime
import hashlib
import importlib
import io
import json
import os
import subprocess
import sys
import tempfile
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE_DIR = os.path.join(REPO, "bench", "profiles", "zero-bubble-paper")
SCHEDULER_DIR = "megatron/core/pipeline_parallel/zerobubble/scheduler"
PUBLIC_FILES = ["graph.py", "zb.py", "zbv.py", "zbv_greedy.py", "v_auto_schedule.py"]
PACKAGES = ["megatron", "megatron.core", "megatron.core.pipeline_parallel",
            "megatron.core.pipeline_parallel.zerobubble",
            "megatron.core.pipeline_parallel.zerobubble.scheduler"]

# The pipelines (files in PROFILE_DIR): each model has a loop profile (one chunk per rank) and a
# V-shape profile (two chunks per rank, each with half the times and bytes of a loop stage).
PROFILES = ["zb-1.5b-loop", "zb-1.5b-vshape", "zb-6.2b-loop", "zb-6.2b-vshape",
            "zb-14.6b-loop", "zb-14.6b-vshape", "zb-28.3b-loop", "zb-28.3b-vshape",
            "uniform-r8-m32-loop", "uniform-r8-m32-vshape"]

# The comparisons: (placement, budget, label, short name, public scheduler, optpipe counterpart).
# Budgets: "1f1b" = static + P·A (1F1B's peak), "half" = static + P·A/2, A = one loop stage's
# activation bytes; a public schedule whose peak is above its nominal budget is compared at its
# own peak instead.
ROWS = [
    ("loop", "1f1b", "ZB-1p (zb.py, max_mem P·A)", "ZB-1p", "zb", "zb-h1"),
    ("loop", "half", "zb.py, max_mem P·A/2", "zb.py", "zb", "zb-auto"),
    ("vshape", "1f1b", "ZB-V (zbv.py, max_mem P·A)", "ZB-V", "zbv", "zb-v"),
    ("vshape", "half", "ZB-V (zbv.py, max_mem P·A/2)", "ZB-V", "zbv", "zb-v"),
    ("vshape", "half", "V-Half (zbv_greedy.py)", "V-Half", "v-half", "v-half"),
    ("vshape", "half", "V-Min (zbv_greedy.py)", "V-Min", "v-min", "v-min"),
    ("vshape", "half", "v_auto_schedule.py, P chunks", "v_auto", "v-auto", "zb-auto"),
]

# auto / public above this counts as slower (the exit status): makespans are printed to 0.1 ms.
RATIO_TOLERANCE = 1.0005


class Failure(Exception):
    """A public scheduler or a conversion that did not produce a schedule; the row says why."""


def die(message):
    print(f"zb_reference_check: error: {message}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# Profiles


class Profile:
    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.text = f.read()
        doc = json.loads(self.text)
        self.doc = doc
        self.name = doc["name"]
        pipe = doc["pipeline"]
        self.ranks = pipe["ranks"]
        self.chunks = pipe.get("chunks_per_rank", 1)
        self.placement = pipe.get("placement", "loop")
        self.microbatches = pipe["microbatches"]
        if self.placement not in ("loop", "vshape") or doc.get("stages"):
            die(f"{path}: this check reads uniform loop or vshape profiles only")
        d = doc["stage_defaults"]
        self.t = {"F": float(d["forward"]), "B": float(d["backward_input"]),
                  "W": float(d["backward_weight"])}
        self.A = int(d["activation_bytes"])  # per stage (per chunk on the V-shape)
        self.G = int(d.get("weight_grad_bytes", 0))
        self.p2p = float(doc.get("p2p_latency", 0))
        self.static = int(doc["memory"].get("static_bytes", 0))
        self.stages = self.ranks * self.chunks
        if self.placement == "loop":
            self.rank_of_stage = [s % self.ranks for s in range(self.stages)]
        else:
            if self.chunks != 2:
                die(f"{path}: vshape needs chunks_per_rank = 2")
            self.rank_of_stage = [s if s < self.ranks else 2 * self.ranks - 1 - s
                                  for s in range(self.stages)]
        # Activation bytes of one loop stage (two V chunks): the table's unit A.
        self.stage_A = self.A * self.chunks
        # Canonical JSON (sorted keys, no whitespace), as optpipe hashes it (docs/profile.md).
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        self.sha256 = hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def budget(self, key):
        if key == "1f1b":
            return self.static + self.ranks * self.stage_A
        if key == "half":
            return self.static + self.ranks * self.stage_A // 2
        raise ValueError(key)

    def stage(self, rank, chunk):
        """Global stage of (rank, chunk): loop s = chunk·R + rank; V-shape r and 2R-1-r."""
        if self.placement == "loop":
            return chunk * self.ranks + rank
        return rank if chunk == 0 else 2 * self.ranks - 1 - rank


# ---------------------------------------------------------------------------------------------
# The public code


def import_public(folder):
    sched = os.path.join(folder, SCHEDULER_DIR)
    missing = [f for f in PUBLIC_FILES if not os.path.isfile(os.path.join(sched, f))]
    if missing:
        die(f"--public {folder}: no {SCHEDULER_DIR}/{missing[0]} there; check out "
            "sail-sg/zero-bubble-pipeline-parallelism into that folder")
    # Empty package modules whose __path__ points into the checkout: importing the scheduler
    # files then runs none of megatron's __init__.py files (they pull in torch, apex, ...).
    for name in PACKAGES:
        if name in sys.modules:
            continue
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(folder, *name.split("."))]
        sys.modules[name] = module
    # zb.py imports torch and pulp at its top. Of them, the path this script calls
    # (Graph.build_graph, initial_solution -> manual_order) uses none: torch only names the type
    # of an unused dataclass field (precede: torch.Tensor), pulp only serves
    # create_scheduled_nodes (pulp.value), which this script does not call. Where either is not
    # installed, a stand-in with just those names lets zb.py import; the real ones are used when
    # present (pip install torch pulp).
    stand_ins = []
    for name in ("torch", "pulp"):
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            if name == "torch":
                module.Tensor = type("Tensor", (), {})
            else:
                module.value = lambda x: x
            sys.modules[name] = module
            stand_ins.append(name)
    if stand_ins:
        print(f"note: {' and '.join(stand_ins)} not installed: zb.py imports "
              f"{'them' if len(stand_ins) > 1 else 'it'} but its greedy scheduler uses "
              f"{'neither' if len(stand_ins) > 1 else 'none of it'}; using "
              f"{'stand-ins' if len(stand_ins) > 1 else 'a stand-in'}",
              file=sys.stderr)
    prefix = PACKAGES[-1] + "."
    mods = {}
    for name in ("graph", "zb", "zbv", "zbv_greedy", "v_auto_schedule"):
        try:
            mods[name] = importlib.import_module(prefix + name)
        except Exception as e:  # noqa: BLE001 - report any import failure in one line
            die(f"cannot import {SCHEDULER_DIR}/{name}.py from {folder}: "
                f"{type(e).__name__}: {e}")
    return mods


def quiet(fn, *args, **kwargs):
    """Runs a public scheduler with its prints swallowed; any exception becomes a Failure."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the public code asserts and raises freely
            raise Failure(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from e


def graph_config(mods, prof, max_mem):
    R = prof.ranks
    return mods["graph"].GraphConfig(
        cost_f=[prof.t["F"]] * R, cost_b=[prof.t["B"]] * R, cost_w=[prof.t["W"]] * R,
        cost_comm=prof.p2p,
        # Bytes: F allocates A, B frees A - G, W frees G (optpipe's model, docs/semantics.md).
        mem_f=[prof.A] * R, mem_b=[-(prof.A - prof.G)] * R, mem_w=[-prof.G] * R,
        max_mem=[max_mem] * R if max_mem is not None else None,
        max_chunks=prof.chunks, n_stages=R, n_micro=prof.microbatches)


def public_zb(mods, prof, max_mem):
    """zb.py's greedy (the paper's ZB heuristic): ZB-1p at max_mem = P·A, zb-auto's at a budget."""
    zb = mods["zb"]
    config = graph_config(mods, prof, max_mem)
    graph = zb.Graph.build_graph(prof.ranks, prof.microbatches, config)
    _, order, _ = quiet(zb.initial_solution, graph, print_result=False)
    ranks = []
    for stage in range(prof.ranks):
        ops = [(order[graph.get_id(k, stage, mb)], "FBW"[k], 0, mb)
               for k in range(3) for mb in range(prof.microbatches)]
        ranks.append([(op, chunk, mb) for _, op, chunk, mb in sorted(ops)])
    return ranks


def nodes_to_order(local_order):
    """graph.ScheduledNode lists (chunk already the real one: create_schedule maps B/W's internal
    chunk c to 1 - c) to per-rank (op, chunk, microbatch)."""
    return [[(str(n.type.value), int(n.chunk), int(n.microbatch)) for n in rank]
            for rank in local_order]


def public_zbv(mods, prof, max_mem):
    """zbv.py: ZB-V, memory-limited to max_mem bytes of one rank's activations."""
    graph = mods["zbv"].PipelineGraph(
        prof.ranks, prof.microbatches, prof.t["F"], prof.t["B"], prof.t["W"], prof.p2p,
        prof.A, -(prof.A - prof.G), -prof.G, max_mem=max_mem)
    return nodes_to_order(quiet(graph.create_schedule, graph_config(mods, prof, None)))


def public_v_greedy(mods, prof, setup):
    """zbv_greedy.py: the runtime's V-Half ('half') and V-Min ('min') from fixed patterns."""
    graph = mods["zbv_greedy"].PipelineGraph(
        prof.ranks, prof.microbatches, setup, prof.t["F"], prof.t["B"], prof.t["W"], prof.p2p)
    return nodes_to_order(quiet(graph.create_schedule, graph_config(mods, prof, None)))


def public_v_auto(mods, prof, max_mem_chunks):
    """v_auto_schedule.py: building blocks under max_mem chunk activations (it counts F/f as +1
    and W/w as -1, so B's release of A - G is not credited)."""
    result = quiet(mods["v_auto_schedule"].schedule, prof.ranks, prof.microbatches,
                   (prof.t["F"], prof.t["B"], prof.t["W"], prof.p2p), max_mem_chunks)
    # Node.chunk is `p in "fBW"`: F and b/w belong to chunk 0 (stage r), f and B/W to chunk 1.
    return [[(n.type, int(n.chunk), int(n.minibatch)) for n in rank] for rank in result]


def run_public(mods, prof, kind, budget_key):
    act_budget = prof.budget(budget_key) - prof.static
    if kind == "zb":
        return public_zb(mods, prof, act_budget)
    if kind == "zbv":
        return public_zbv(mods, prof, act_budget)
    if kind in ("v-half", "v-min"):
        return public_v_greedy(mods, prof, kind[2:])
    if kind == "v-auto":
        return public_v_auto(mods, prof, act_budget // prof.A)
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------------
# Conversion: per-rank order -> timed optpipe.schedule/v1


def time_order(prof, order):
    """Times per-rank (op, chunk, microbatch) lists as soon as possible with optpipe's cost model
    and returns per-rank [(op, stage, microbatch, start, end)]."""
    R, S, m = prof.ranks, prof.stages, prof.microbatches
    if len(order) != R:
        raise Failure(f"{len(order)} ranks, the profile has {R}")
    ranks = []
    for r, ops in enumerate(order):
        seq = [(op, prof.stage(r, chunk), mb) for op, chunk, mb in ops]
        expected = {(op, s, mb) for op in "FBW" for s in range(S) if prof.rank_of_stage[s] == r
                    for mb in range(m)}
        if len(seq) != len(expected) or set(seq) != expected:
            extra = sorted(set(seq) - expected)[:1] or [
                x for x in seq if seq.count(x) > 1][:1]
            lost = sorted(expected - set(seq))[:1]
            raise Failure(f"rank {r}: not every F, B and W once (e.g. "
                          f"{'extra ' + str(extra[0]) if extra else 'missing ' + str(lost[0])})")
        ranks.append(seq)

    def dep(op, s, mb):
        if op == "F":
            return ("F", s - 1, mb) if s > 0 else None
        if op == "B":
            return ("B", s + 1, mb) if s < S - 1 else ("F", S - 1, mb)
        return ("B", s, mb)

    end = {}
    timed = [[] for _ in range(R)]
    free = [0.0] * R
    pos = [0] * R
    left = sum(len(x) for x in ranks)
    while left:
        progress = False
        for r in range(R):
            while pos[r] < len(ranks[r]):
                op, s, mb = ranks[r][pos[r]]
                d = dep(op, s, mb)
                start = free[r]
                if d is not None:
                    if d not in end:
                        break
                    latency = prof.p2p if prof.rank_of_stage[d[1]] != r else 0.0
                    start = max(start, end[d] + latency)
                finish = start + prof.t[op]
                end[(op, s, mb)] = finish
                timed[r].append((op, s, mb, start, finish))
                free[r] = finish
                pos[r] += 1
                left -= 1
                progress = True
        if not progress:
            waits = [f"rank {r} at {ranks[r][pos[r]]}" for r in range(R) if pos[r] < len(ranks[r])]
            raise Failure("the order deadlocks: " + ", ".join(waits[:3]))
    return timed


def peak_bytes(prof, actions):
    """Static + highest live bytes of one rank: F allocates A at its start, B frees A - G and W
    frees G at their ends; at equal times releases come first (docs/semantics.md)."""
    events = []
    for op, _, _, start, finish in actions:
        if op == "F":
            events.append((start, 1, prof.A))
        elif op == "B":
            events.append((finish, 0, -(prof.A - prof.G)))
        else:
            events.append((finish, 0, -prof.G))
    live = peak = 0
    for _, _, delta in sorted(events):
        live += delta
        peak = max(peak, live)
    return prof.static + peak


def schedule_json(prof, timed, method, budget, bound):
    first = min(a[3] for rank in timed for a in rank)
    last = max(a[4] for rank in timed for a in rank)
    ranks, total_busy, longest = [], 0.0, None
    for r, actions in enumerate(timed):
        busy = 0.0
        for a in actions:
            busy += a[4] - a[3]
        span = max(a[4] for a in actions) - min(a[3] for a in actions)
        total_busy += busy
        if longest is None or span > longest[0]:
            longest = (span, busy)
        ranks.append({"rank": r, "busy": busy, "peak_bytes": peak_bytes(prof, actions),
                      "budget_bytes": budget,
                      "actions": [{"op": op, "stage": s, "microbatch": mb, "start": t0, "end": t1}
                                  for op, s, mb, t0, t1 in actions]})
    makespan = last - first
    lower_bound, source = bound
    return {
        "format": "optpipe.schedule/v1",
        "profile": {"name": prof.name, "sha256": prof.sha256},
        "time_unit": prof.doc.get("time_unit", "ms"),
        "pipeline": {"ranks": prof.ranks, "chunks_per_rank": prof.chunks,
                     "microbatches": prof.microbatches, "rank_of_stage": prof.rank_of_stage},
        "method": method,
        "metrics": {"makespan": makespan, "span": longest[0],
                    "idle_fraction": 1 - total_busy / (prof.ranks * makespan),
                    "bubble_rate": (longest[0] - longest[1]) / longest[0],
                    "lower_bound": lower_bound, "lower_bound_source": source,
                    "gap": makespan / lower_bound - 1 if lower_bound > 0 else 0,
                    "feasible": all(x["peak_bytes"] <= budget for x in ranks)},
        "solver": None,
        "ranks": ranks,
    }


# ---------------------------------------------------------------------------------------------
# optpipe


class Optpipe:
    def __init__(self, bindir, work, auto_effort, auto_time_limit):
        self.compile_bin = os.path.join(bindir, "optpipe-compile")
        self.optpipe_bin = os.path.join(bindir, "optpipe")
        for b in (self.compile_bin, self.optpipe_bin):
            if not os.access(b, os.X_OK):
                die(f"--optpipe-bin {bindir}: no executable {os.path.basename(b)} there "
                    "(build with `make`)")
        self.work = work
        self.auto_effort = auto_effort
        self.auto_time_limit = auto_time_limit
        self.compiled = {}

    def compile(self, prof, method, budget):
        """(summary dict, schedule path) of optpipe-compile, or (None, reason)."""
        key = (prof.path, method, budget)
        if key in self.compiled:
            return self.compiled[key]
        stem = os.path.join(self.work, f"{prof.name}.{budget}.{method}")
        cmd = [self.compile_bin, prof.path, "--method", method, "--memory-budget", str(budget),
               "-q", "-o", stem + ".json", "--summary-json", stem + ".summary.json"]
        if method == "auto":
            cmd += ["--effort", str(self.auto_effort), "--time-limit", str(self.auto_time_limit)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            with open(stem + ".summary.json", encoding="utf-8") as f:
                result = (json.load(f), stem + ".json")
        elif proc.returncode == 3:
            result = (None, "does not fit")
        else:
            last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            result = (None, last)
        self.compiled[key] = result
        return result

    def validate(self, prof, path, budget):
        """(True, summary) or (False, the validator's message)."""
        proc = subprocess.run([self.optpipe_bin, "validate", prof.path, path,
                               "--memory-budget", str(budget), "--summary-json", "-"],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return True, json.loads(proc.stdout)
        return False, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]

    def render_ok(self, prof, path):
        """Checks every rule but the budget (optpipe render loads with an unlimited budget)."""
        proc = subprocess.run([self.optpipe_bin, "render", prof.path, path,
                               "-o", path + ".svg"], capture_output=True, text=True)
        if proc.returncode == 0:
            return True, ""
        return False, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]

    def bound(self, prof, budget, methods):
        """The profile's own lower bound at this budget (the validator checks the schedule file's
        claim against it): from an optpipe compile at that budget that the solver did not raise,
        else from validating one of them."""
        schedules = []
        for method in methods:
            summary, path = self.compile(prof, method, budget)
            if summary is None:
                continue
            if summary["lower_bound_source"] != "solver":
                return summary["lower_bound"], summary["lower_bound_source"]
            schedules.append(path)
        for path in schedules:
            ok, summary = self.validate(prof, path, budget)
            if ok:
                return summary["lower_bound"], summary["lower_bound_source"]
        return None


# ---------------------------------------------------------------------------------------------


def fmt_ms(x):
    return f"{x:.1f}"


def fmt_a(x):
    """A number of A units: 8 -> "8", 4.375 -> "4.38"."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 when optpipe's auto is at most every public schedule's makespan "
        "at a budget where that schedule fits (each row: the nominal budget, or the public "
        f"schedule's own peak where it is above that; auto / public <= {RATIO_TOLERANCE}); "
        "1 when auto is slower on some row (or finds no schedule there), printed after the "
        "table, the rows named on stderr; 2 on a usage or setup error.")
    parser.add_argument("--public", required=True, metavar="DIR",
                        help="checkout of sail-sg/zero-bubble-pipeline-parallelism")
    parser.add_argument("--optpipe-bin", metavar="DIR", default=os.path.join(REPO, "build", "bin"),
                        help="folder with optpipe and optpipe-compile (default: build/bin)")
    parser.add_argument("--only", metavar="NAME",
                        help="only pipelines whose name contains NAME (e.g. 1.5b, vshape, "
                        "uniform)")
    parser.add_argument("--work", metavar="DIR",
                        help="keep the schedules here (default: a temporary folder, removed)")
    parser.add_argument("--auto-effort", type=float, default=0.25,
                        help="--effort of optpipe's auto (default 0.25, at which the 16-rank "
                        "V-shape finishes within the time limit)")
    parser.add_argument("--auto-time-limit", type=float, default=60,
                        help="--time-limit of optpipe's auto in seconds (default 60)")
    parser.add_argument("--no-fail", action="store_true",
                        help="exit 0 even where auto is slower than a public schedule (the rows "
                        "are still named on stderr)")
    args = parser.parse_args()

    if not os.path.isdir(args.public):
        die(f"--public {args.public}: no such folder")
    mods = import_public(os.path.abspath(args.public))
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        work_ctx = contextlib.nullcontext(os.path.abspath(args.work))
    else:
        work_ctx = tempfile.TemporaryDirectory(prefix="zbcheck.")
    commit = public_commit(args.public)

    profiles = []
    for stem in PROFILES:
        path = os.path.join(PROFILE_DIR, f"{stem}.json")
        if not os.path.isfile(path):
            die(f"{path}: missing (the profiles ship with optpipe)")
        prof = Profile(path)
        if not args.only or args.only in prof.name:
            profiles.append(prof)
    if not profiles:
        names = ", ".join(Profile(os.path.join(PROFILE_DIR, f"{stem}.json")).name
                          for stem in PROFILES)
        die(f"--only {args.only}: no pipeline's name contains it (names: {names})")

    with work_ctx as work:
        opt = Optpipe(args.optpipe_bin, work, args.auto_effort, args.auto_time_limit)
        lines, notes, auto_notes, slower = [], [], set(), []
        for prof in profiles:
            for row in ROWS:
                if row[0] != prof.placement:
                    continue
                line, note, miss = compare(opt, mods, prof, row, auto_notes)
                lines.append(line)
                if note:
                    notes.append(note)
                if miss:
                    slower.append(miss)
                print(f"done: {prof.name}, {row[1]} budget, {row[2]}", file=sys.stderr)

    print(f"Public Zero Bubble code {commit} against optpipe, "
          f"{datetime.date.today().isoformat()}. Makespans in ms; A = one loop stage's activation "
          "bytes (two V chunks); ratio = optpipe / public, < 1: optpipe is faster.\n")
    print("| pipeline | budget | public | public ms | optpipe (method) ms | ratio "
          "| auto ms | auto ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for line in lines:
        print(line)
    if notes or auto_notes:
        print()
    for note in notes:
        print(f"- {note}")
    for note in sorted(auto_notes):
        print(f"- {note}")
    sys.stdout.flush()

    if slower:
        print(f"zb_reference_check: optpipe auto is slower than the public schedule at a budget "
              f"where that fits ({len(slower)} row{'s' if len(slower) > 1 else ''}):",
              file=sys.stderr)
        for miss in slower:
            print(f"  {miss}", file=sys.stderr)
        if not args.no_fail:
            sys.exit(1)


def public_commit(folder):
    try:
        proc = subprocess.run(["git", "-C", folder, "rev-parse", "--short=8", "HEAD"],
                              capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    except OSError:
        pass
    return "(commit unknown: not a git checkout)"


def compare(opt, mods, prof, row, auto_notes):
    """One table row: (markdown line, note or None, description of a missed target or None)."""
    _, budget_key, label, short, kind, counterpart = row
    R = prof.ranks
    pipeline = prof.name.replace("zb-paper-", "")
    budget = prof.budget(budget_key)
    budget_text = (f"1F1B: static + {R}A" if budget_key == "1f1b" else f"half: static + {fmt_a(R / 2)}A")

    # The public side first: its peak decides the row's budget.
    note = failure = None
    timed = None
    try:
        order = run_public(mods, prof, kind, budget_key)
        timed = time_order(prof, order)
    except Failure as e:
        failure = str(e)
        note = f"{pipeline} {label}: the public code failed: {e}"
        if kind == "zbv" and failure.startswith("AssertionError: 0, 0,"):
            # One note for all such rows (the message names the last rank: 0, 0, P - 1, 1).
            note = None
            auto_notes.add("\"failed\": zbv.py asserts (`AssertionError: 0, 0, P-1, 1`) at a "
                           "max_mem below 1F1B's: its warm-up places a forward before its input")
    if timed is not None:
        peak = max(peak_bytes(prof, actions) for actions in timed)  # static + activations
        if peak > budget:
            budget = peak
            budget_text = f"static + {fmt_a((peak - prof.static) / prof.stage_A)}A ({short}'s peak)"

    # optpipe's side at that budget
    cells = {}
    for method in (counterpart, "auto"):
        summary, why = opt.compile(prof, method, budget)
        cells[method] = (summary, why)
        if summary is None and why != "does not fit":
            auto_notes.add(f"optpipe-compile --method {method} on {prof.name} failed: {why}")
        if method == "auto" and summary is not None:
            solver = summary.get("solver") or {}
            if solver.get("stop_reason") in ("time_limit", "interrupted"):
                auto_notes.add(f"optpipe auto on {prof.name} stopped at its time limit "
                               f"({opt.auto_time_limit:g} s): not reproducible")
    auto_notes.add(f"optpipe auto ran with --effort {opt.auto_effort:g} "
                   f"--time-limit {opt.auto_time_limit:g}")
    bound = opt.bound(prof, budget, [counterpart, "zb-auto", "auto"])

    makespan = None
    fits = False
    public_ms = "failed"
    if timed is not None:
        # Without optpipe's bound at this budget the file cannot pass validate's header check;
        # it is written all the same (with a bound of 0) and reported as not checked.
        doc = schedule_json(prof, timed, f"public {kind}", budget,
                            bound if bound is not None else (0.0, "critical_path"))
        path = os.path.join(opt.work, f"{prof.name}.{budget}.public-{kind}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        makespan = doc["metrics"]["makespan"]
        public_ms = fmt_ms(makespan)
        ok, result = opt.validate(prof, path, budget) if bound is not None else (None, "")
        if ok is None:
            public_ms += " (not checked)"
            note = (f"{pipeline} {label}: not validated: no optpipe schedule at this budget "
                    "to read the profile's lower bound from")
        elif ok:
            fits = True
            if abs(result["makespan"] - makespan) > 1e-6 * makespan:
                note = (f"{pipeline} {label}: optpipe validate times it at "
                        f"{fmt_ms(result['makespan'])}")
        else:
            public_ms += " (invalid)"
            note = f"{pipeline} {label}: invalid: {result}"

    def ours(method):
        summary, why = cells[method]
        if summary is None:
            return ["does not fit" if why == "does not fit" else "error", "—"], None
        ratio = summary["makespan"] / makespan if makespan else None
        return [fmt_ms(summary["makespan"]), f"{ratio:.3f}" if ratio is not None else "—"], ratio

    (ms, ratio), _ = ours(counterpart)
    (auto_ms, auto_ratio), auto_r = ours("auto")
    miss = None
    if fits and (auto_r is None or auto_r > RATIO_TOLERANCE):
        miss = (f"{pipeline}, {budget_text}, {label}: public {public_ms} ms, auto "
                + (f"{auto_ms} ms (ratio {auto_ratio})" if auto_r is not None else auto_ms))
    cells_out = [pipeline, budget_text, label, public_ms, f"{ms} ({counterpart})", ratio,
                 auto_ms, auto_ratio]
    return "| " + " | ".join(cells_out) + " |", note, miss


if __name__ == "__main__":
    main()
