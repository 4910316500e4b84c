"""The conformance suite's harness: each model of conformance_models.py through the documented loop
(profile_stages -> optpipe-compile at a budget that forces offloads, or recomputes, or none ->
optpipe_rt.torch.PipelineSchedule on 4 gloo CPU processes), with what every rank measured beside
what the schedule predicted for it.

    python conformance.py [MODEL ...]      # prints the measured / predicted table (docs/benchmarks.md)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import conformance_models as models  # noqa: E402
from built_tools import tool  # noqa: E402

RTOL = 1e-5
LINK_GBPS = 5.0       # the host link of the offloading cases
STEPS = 2             # the first warms up; the second is measured


def profile_model(name, path):
    """Measures the model's stages with profile_stages (one microbatch), with a host link."""
    from optpipe_rt.torch import profile_stages
    torch.manual_seed(0)
    torch.set_num_threads(1)
    stages, batch, _, _ = models.build(name)
    return profile_stages(stages, batch.chunk(models.MICROBATCHES)[0],
                          microbatches=models.MICROBATCHES, budget_bytes="1GiB",
                          offload_gb_per_s=LINK_GBPS, warmup=2, iterations=5, name=name,
                          output=path)


def case_profiles(profile):
    """{case: profile} for the three cases of a measured profile: "plain" (its budget: no
    transfer), "offload" (room for 2 of rank r's activations beside its static bytes, a 5 GB/s
    link: offloads) and "recompute" (the same budget, no link: recomputes)."""
    tight = json.loads(json.dumps(profile))
    per_rank = tight["memory"]["per_rank"]
    ranks = tight["pipeline"]["ranks"]
    for entry in per_rank:
        r = entry["rank"]
        activation = max(s["activation_bytes"] for s in tight["stages"]
                         if s["index"] % ranks == r)
        entry["budget_bytes"] = entry["static_bytes"] + 2 * activation
    no_link = json.loads(json.dumps(tight))
    del no_link["offload"]
    return {"plain": profile, "offload": tight, "recompute": no_link}


def compile_schedule(profile_path, schedule_path, method="auto"):
    subprocess.run([tool("optpipe-compile"), profile_path, "--method", method, "-q",
                    "--time-limit", "20", "--threads", "2", "-o", schedule_path], check=True)
    with open(schedule_path, encoding="utf-8") as f:
        return json.load(f)


def predicted_activation_peaks(schedule, profile):
    """Per rank, the schedule's predicted peak of activation bytes (its peak less static bytes)."""
    static = {e["rank"]: e["static_bytes"] for e in profile["memory"]["per_rank"]}
    return [r["peak_bytes"] - static[r["rank"]] for r in schedule["ranks"]]


def _close(a, b):
    scale = max(float(b.abs().max()), 1e-30)
    return bool(((a - b).abs() <= 1e-6 * scale + RTOL * b.abs()).all())


def _reference(stages, batch, target, loss_fn):
    losses = []
    for xs, ys in zip(batch.chunk(models.MICROBATCHES), target.chunk(models.MICROBATCHES)):
        out = xs
        for module in stages:
            out = module(out)
        loss = loss_fn(out, ys)
        loss.backward()
        losses.append(loss.item())
    grads = [[p.grad / models.MICROBATCHES for p in m.parameters()] for m in stages]
    return losses, grads


def _run_job(rank, job):
    from torch.distributed.pipelining import PipelineStage
    from optpipe_rt.torch import PipelineSchedule, load_schedule

    sched = load_schedule(job["schedule"], job["profile"])
    mine = [s for s in range(sched.stages) if sched.stage(s)["rank"] == rank]
    stages, batch, target, loss_fn = models.build(job["model"])
    ref_stages, _, _, _ = models.build(job["model"])
    ref_losses, ref_grads = _reference(ref_stages, batch, target, loss_fn)
    device = torch.device("cpu")
    pipeline_stages = [PipelineStage(stages[s], s, sched.stages, device) for s in mine]
    pipeline = PipelineSchedule(pipeline_stages, job["schedule"], sched.microbatches,
                                loss_fn=loss_fn, profile=job["profile"],
                                offload=job.get("offload", True))
    grads_equal = losses_equal = True
    seconds = []
    for _ in range(STEPS):
        for s in mine:
            stages[s].zero_grad(set_to_none=True)
        losses = []
        start = time.perf_counter()
        if 0 in mine:
            pipeline.step(batch, target=target, losses=losses)
        else:
            pipeline.step(target=target, losses=losses)
        seconds.append(time.perf_counter() - start)
        grads_equal &= all(_close(p.grad, ref) for s in mine
                           for p, ref in zip(stages[s].parameters(), ref_grads[s]))
        losses_equal &= (len(losses) == (sched.microbatches if sched.stages - 1 in mine else 0)
                         and all(abs(a.item() - b) <= RTOL * abs(b)
                                 for a, b in zip(losses, ref_losses)))
    if job.get("write_profile"):
        pipeline.write_profile(job["write_profile"], name=f"{job['model']}-measured")
    stats = vars(pipeline.offload_stats())
    result = {"rank": rank, "grads_equal": grads_equal, "losses_equal": losses_equal,
              "stats": stats, "scheduled": vars(pipeline.scheduled),
              "planned_pool_bytes": sched.rank(rank)["host_pool_bytes"],
              "step_seconds": seconds[-1], "predicted_makespan": pipeline.predicted_makespan}
    pipeline.close()
    return result


def _worker(rank, world, port, jobs, out_dir):
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, use_libuv=True)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    try:
        results = [_run_job(rank, job) for job in jobs]
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_jobs(jobs, ranks=models.STAGES):
    """Runs each job ({"model", "schedule" (JSON), "profile", optional "offload",
    "write_profile"}) in one group of `ranks` gloo processes: per job, each rank's result."""
    with tempfile.TemporaryDirectory(prefix="optpipe-conformance-") as out_dir:
        mp.start_processes(_worker, nprocs=ranks, start_method="fork",
                           args=(ranks, _free_port(), jobs, out_dir))
        per_rank = []
        for rank in range(ranks):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                per_rank.append(json.load(f))
    return [[per_rank[r][j] for r in range(ranks)] for j in range(len(jobs))]


def prepare(names, scratch):
    """Profiles each model and compiles its three cases: [(model, case, profile path, profile,
    schedule path, schedule)]."""
    prepared = []
    for name in names:
        measured = profile_model(name, os.path.join(scratch, f"{name}.json"))
        for case, spec in case_profiles(measured).items():
            profile_path = os.path.join(scratch, f"{name}-{case}.json")
            with open(profile_path, "w", encoding="utf-8") as f:
                json.dump(spec, f)
            schedule_path = os.path.join(scratch, f"{name}-{case}.schedule.json")
            schedule = compile_schedule(profile_path, schedule_path)
            prepared.append((name, case, profile_path, spec, schedule_path, schedule))
    return prepared


def table(prepared, results):
    """The markdown rows of docs/benchmarks.md's conformance table."""
    rows = ["| model | case | method | offloads / recomputes | measured / predicted activation "
            "peak, per rank | worst | host pool peak / planned | step on CPU / predicted |",
            "|---|---|---|---|---|---|---|---|"]
    for (name, case, _, spec, _, schedule), ranks in zip(prepared, results):
        predicted = predicted_activation_peaks(schedule, spec)
        ratios = [r["stats"]["peak_resident_bytes"] / p if p else 0.0
                  for r, p in zip(ranks, predicted)]
        moved = (sum(r["stats"]["offloads"] for r in ranks),
                 sum(r["stats"]["recomputes"] for r in ranks))
        pool = max((r["stats"]["host_pool_peak_bytes"] / r["planned_pool_bytes"]
                    for r in ranks if r["planned_pool_bytes"]), default=0.0)
        step = max(r["step_seconds"] for r in ranks) * 1e3 / ranks[0]["predicted_makespan"]
        rows.append(f"| {name} | {case} | {schedule['method']} | {moved[0]} / {moved[1]} | "
                    f"{' '.join(f'{x:.3f}' for x in ratios)} | {max(ratios):.3f} | "
                    f"{pool:.3f} | {step:.2f} |")
    return "\n".join(rows)


def main(argv):
    names = argv or list(models.MODELS)
    with tempfile.TemporaryDirectory(prefix="optpipe-conformance-") as scratch:
        prepared = prepare(names, scratch)
        results = run_jobs([{"model": name, "schedule": path, "profile": profile_path}
                            for name, _, profile_path, _, path, _ in prepared])
    print(table(prepared, results))
    ok = all(r["grads_equal"] and r["losses_equal"] for ranks in results for r in ranks)
    print("loss and gradients equal the single-process reference" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
