"""A measured `optpipe.profile/v1` from training steps (`PipelineSchedule.write_profile`): what each
op took and what each stage's forward saved on the rank that ran it, so that `optpipe-compile` can
recompile from what training measured (docs/runtime-shim.md, "A profile from training").

`StepRecorder` is one rank's record: op durations per (op, stage), and per stage the bytes its
forwards saved (A, packed as an offload moves them), what stayed after the input backward (G) and
what a recomputed forward kept (C). `build_profile` joins every rank's record into one profile,
with the pipeline, memory and link of the schedule it ran. No torch import here.
"""

import statistics
import time

_OPS = ("F", "B", "W", "BW", "R")


class StepRecorder:
    """Durations and saved bytes of one rank's ops, step by step. `clock` returns seconds; on a
    GPU it should synchronise first (or the caller passes CUDA-event timings to `add`)."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._steps = []          # per step: {(op, stage): [seconds, ...]}
        self.activation = {}      # stage -> A, the most bytes one forward saved
        self.kept_for_weights = {}  # stage -> G, the most bytes one input backward left
        self.checkpoint = {}      # stage -> C, the most bytes one recomputed forward kept

    def start_step(self):
        self._steps.append({})

    def now(self):
        return self._clock()

    def add(self, op, stage, seconds):
        self._steps[-1].setdefault((op, stage), []).append(seconds)

    @staticmethod
    def _most(table, stage, nbytes):
        table[stage] = max(table.get(stage, 0), nbytes)

    def saved(self, stage, nbytes, recomputed):
        self._most(self.checkpoint if recomputed else self.activation, stage, nbytes)

    def kept(self, stage, nbytes):
        self._most(self.kept_for_weights, stage, nbytes)

    def summary(self):
        """{"times": {"F:3": median seconds, ...}, "A": {...}, "G": {...}, "C": {...}}: medians over
        the steps after the first (which includes torch's first-step set-up), or the first alone."""
        steps = self._steps[1:] if len(self._steps) > 1 else self._steps
        samples = {}
        for step in steps:
            for (op, stage), values in step.items():
                samples.setdefault(f"{op}:{stage}", []).extend(values)
        return {"times": {k: statistics.median(v) for k, v in samples.items()},
                "A": dict(self.activation), "G": dict(self.kept_for_weights),
                "C": dict(self.checkpoint), "steps": len(steps)}


def build_profile(schedule, summaries, name="measured"):
    """An optpipe.profile/v1 dict from every rank's `StepRecorder.summary()` (JSON round-tripped:
    stage keys may be strings) and the `optpipe_rt.Schedule` they ran: its pipeline, placement,
    budgets, static bytes, p2p latency and link; each stage's times and bytes as measured where its
    rank measured them, else the schedule's. A fused BW's time is split between B and W in the
    schedule's proportion."""
    unit_per_second = 1e6 if schedule.time_unit == "us" else 1e3
    times, bytes_of = {}, {"A": {}, "G": {}, "C": {}}
    for summary in summaries:
        for key, seconds in summary["times"].items():
            times[key] = seconds * unit_per_second
        for kind in bytes_of:
            for stage, nbytes in summary[kind].items():
                bytes_of[kind][int(stage)] = nbytes
    stages = []
    for s in range(schedule.stages):
        planned = schedule.stage(s)
        f = times.get(f"F:{s}", planned["forward"])
        b, w = times.get(f"B:{s}"), times.get(f"W:{s}")
        if (b is None or w is None) and f"BW:{s}" in times:
            total = planned["backward_input"] + planned["backward_weight"]
            share = planned["backward_input"] / total if total > 0 else 0.5
            b, w = times[f"BW:{s}"] * share, times[f"BW:{s}"] * (1 - share)
        b = planned["backward_input"] if b is None else b
        w = planned["backward_weight"] if w is None else w
        a = bytes_of["A"].get(s, planned["activation_bytes"])
        g = min(bytes_of["G"].get(s, planned["weight_grad_bytes"]), a)
        entry = {"index": s, "forward": round(f, 6), "backward_input": round(b, 6),
                 "backward_weight": round(w, 6), "activation_bytes": a, "weight_grad_bytes": g}
        c = bytes_of["C"].get(s, planned["checkpoint_bytes"])
        if c >= 0:
            entry["checkpoint_bytes"] = min(c, a)
            entry["recompute_forward"] = round(times.get(f"R:{s}", planned["recompute_forward"]), 6)
        stages.append(entry)
    ranks = [schedule.rank(r) for r in range(schedule.ranks)]
    profile = {
        "format": "optpipe.profile/v1",
        "name": name,
        "time_unit": schedule.time_unit,
        "pipeline": {"ranks": schedule.ranks, "chunks_per_rank": schedule.chunks_per_rank,
                     "placement": [schedule.stage(s)["rank"] for s in range(schedule.stages)],
                     "microbatches": schedule.microbatches},
        "stages": stages,
        "p2p_latency": schedule.p2p_latency,
        "memory": {"per_rank": [{"rank": r, "budget_bytes": info["budget_bytes"],
                                 "static_bytes": info["static_bytes"]}
                                for r, info in enumerate(ranks)]},
    }
    if schedule.has_offload_link:
        per_second = unit_per_second / 1e9  # bytes per time unit -> GB/s
        profile["offload"] = {"d2h_gb_per_s": schedule.d2h_bytes_per_time * per_second,
                              "h2d_gb_per_s": schedule.h2d_bytes_per_time * per_second,
                              "channels": schedule.channel_mode}
        groups = {}
        for r, info in enumerate(ranks):
            groups.setdefault(info["link_group"], []).append(r)
        shared = [members for members in groups.values() if len(members) > 1]
        if shared:
            profile["offload"]["link_groups"] = shared
    return profile


__all__ = ["StepRecorder", "build_profile"]
