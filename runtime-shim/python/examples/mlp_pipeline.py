"""Runs an optpipe schedule, with its offloads and recomputes, in real PyTorch: an MLP split into
the schedule's stages, one gloo process per rank on the CPU, and the loss and gradients checked
against the same model trained in one process.

    python mlp_pipeline.py SCHEDULE.opsched [--profile PROFILE.json] [--compare]

SCHEDULE is what `optpipe-compile --format bin` wrote (or a JSON schedule with --profile). It
prints, per rank, the offloads, reloads and recomputes done, and the peak bytes of saved
activations resident on the device; --compare runs the same compute order again without the
schedule's offloads and recomputes and prints both peaks. Exits 1 when a gradient differs.

`run(...)` and `run_many(...)` do the same as functions, for tests: they return each rank's result
as a dict.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.pipelining import PipelineStage  # noqa: E402

import optpipe_rt  # noqa: E402
from gloo_group import run_on_ranks  # noqa: E402
from optpipe_rt.torch import PipelineSchedule  # noqa: E402

RTOL = 1e-5


def stage_module(hidden, stage, seed):
    """Stage `stage` of the MLP: the same weights in every process."""
    generator = torch.Generator().manual_seed(seed * 1000 + stage)
    module = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                 torch.nn.Linear(hidden, hidden), torch.nn.Tanh())
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * hidden ** -0.5)
    return module


def batch(hidden, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch_size, hidden, generator=generator),
            torch.randn(batch_size, hidden, generator=generator))


def loss_fn(output, target):
    return torch.nn.functional.mse_loss(output, target)


def reference(modules, x, y, microbatches):
    """Losses per microbatch and gradients of every stage, trained in this process as torch's
    schedules do (gradients summed over microbatches, then divided by their number)."""
    losses = []
    for xs, ys in zip(x.chunk(microbatches), y.chunk(microbatches)):
        out = xs
        for module in modules:
            out = module(out)
        loss = loss_fn(out, ys)
        loss.backward()
        losses.append(loss.item())
    grads = [[p.grad / microbatches for p in module.parameters()] for module in modules]
    return losses, grads


def _close(a, b):
    scale = max(float(b.abs().max()), 1e-30)
    return bool(((a - b).abs() <= 1e-6 * scale + RTOL * b.abs()).all())


def _all_ranks(flag):
    """Whether `flag` holds on every rank (a collective)."""
    value = torch.tensor([1 if flag else 0])
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def _run_job(rank, schedule_path, profile, hidden, batch_size, seed, offload, device="cpu",
             steps=1, watch=None):
    """Runs `steps` steps (the last one measured; earlier ones warm up). With `watch` (a dict:
    "until", a file whose existence ends the run; "ready", a file rank 0 writes after its first
    step), the pipeline watches the schedule's file and steps on, at least `steps` times, until
    every rank has seen "until" (at most 5,000 steps)."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    schedule = optpipe_rt.torch.load_schedule(schedule_path, profile)
    microbatches, num_stages = schedule.microbatches, schedule.stages
    mine = [s for s in range(num_stages) if schedule.stage(s)["rank"] == rank]
    modules = {s: stage_module(hidden, s, seed).to(device) for s in mine}
    stages = [PipelineStage(modules[s], s, num_stages, device) for s in mine]
    pipeline = PipelineSchedule(stages, schedule_path, microbatches, loss_fn=loss_fn,
                                profile=profile, offload=offload, watch=watch is not None)
    x, y = (t.to(device) for t in batch(hidden, batch_size, seed))
    ref_losses, ref_grads = reference([stage_module(hidden, s, seed).to(device)
                                       for s in range(num_stages)], x, y, microbatches)
    grads_equal = losses_equal = True
    step = 0
    while True:
        last = step + 1 >= steps
        if watch is not None:
            last = _all_ranks(last and os.path.exists(watch["until"])) or step + 1 >= 5000
        for module in modules.values():
            module.zero_grad(set_to_none=True)
        losses = []
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        if 0 in mine:
            pipeline.step(x, target=y, losses=losses)
        else:
            pipeline.step(target=y, losses=losses)
        if cuda:
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        grads_equal &= all(_close(p.grad, ref) for s in mine
                           for p, ref in zip(modules[s].parameters(), ref_grads[s]))
        losses_equal &= (all(abs(a.item() - b) <= RTOL * abs(b)
                             for a, b in zip(losses, ref_losses)) and
                         len(losses) == (microbatches if num_stages - 1 in mine else 0))
        if watch is not None and step == 0 and rank == 0:
            with open(watch["ready"], "w"):
                pass
        step += 1
        if last:
            break
    peak_allocated = torch.cuda.max_memory_allocated(device) - base if cuda else None
    stats = pipeline.offload_stats()
    pipeline.close()
    return {"rank": rank, "stages": mine, "grads_equal": grads_equal,
            "losses_equal": losses_equal, "steps": step,
            "losses": [float(v.detach()) for v in losses], "stats": vars(stats),
            "scheduled": vars(pipeline.scheduled), "step_seconds": seconds,
            "peak_allocated_bytes": peak_allocated,
            "switches": [dict(vars(s), predicted_gain=s.predicted_gain)
                         for s in pipeline.switches],
            "method": pipeline.optpipe_schedule.method,
            "predicted_makespan": pipeline.predicted_makespan,
            "microbatch_bytes": batch_size // microbatches * hidden * x.element_size()}


def _run_jobs(rank, jobs, hidden, batch_size, seed, device, steps):
    return [_run_job(rank, job["schedule"], job.get("profile"), hidden, batch_size, seed,
                     job.get("offload", True), device, steps, job.get("watch"))
            for job in jobs]


def run_many(jobs, hidden=64, batch_size=32, seed=1, device="cpu", steps=1):
    """Runs `steps` steps of each job ({"schedule": path, "profile": path or None, "offload":
    bool, "watch": None or {"until": path, "ready": path}, see _run_job}) in one group of CPU
    processes, one per rank (every job has the same rank count): per job, the ranks' results
    (grads_equal and losses_equal over every step, stats of the last step, scheduled, switches,
    ...) in rank order."""
    ranks = {optpipe_rt.torch.load_schedule(job["schedule"], job.get("profile")).ranks
             for job in jobs}
    if len(ranks) != 1:
        raise ValueError(f"the jobs' schedules have different rank counts: {sorted(ranks)}")
    ranks = ranks.pop()
    if torch.device(device).type == "cuda" and ranks != 1:
        raise ValueError(f"--device cuda runs every rank on one GPU, which needs a schedule of "
                         f"1 rank; this one has {ranks}")
    per_rank = run_on_ranks(ranks, _run_jobs, jobs, hidden, batch_size, seed, device, steps)
    return [[per_rank[r][j] for r in range(ranks)] for j in range(len(jobs))]


def run(schedule_path, profile=None, hidden=64, batch_size=32, seed=1, offload=True):
    """One job of run_many: each rank's result, in rank order."""
    job = {"schedule": schedule_path, "profile": profile, "offload": offload}
    return run_many([job], hidden, batch_size, seed)[0]


def _mib(nbytes):
    return f"{nbytes / 2**20:.3f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schedule", help=".opsched (optpipe-compile --format bin) or JSON schedule")
    parser.add_argument("--profile", help="the profile it was compiled for (needed with JSON)")
    parser.add_argument("--hidden", type=int, default=256, help="MLP width (default 256)")
    parser.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    parser.add_argument("--compare", action="store_true",
                        help="also run without the schedule's offloads and recomputes")
    parser.add_argument("--device", default="cpu",
                        help="cpu (default: gloo, a process per rank) or cuda (a 1-rank schedule)")
    parser.add_argument("--steps", type=int, default=1,
                        help="steps to run; the last one is measured (default 1)")
    args = parser.parse_args()
    jobs = [{"schedule": args.schedule, "profile": args.profile, "offload": True}]
    if args.compare:
        jobs.append(dict(jobs[0], offload=False))
    results, *rest = run_many(jobs, args.hidden, args.batch, device=args.device, steps=args.steps)
    plain = rest[0] if rest else None
    ok = True
    for i, r in enumerate(results):
        s = r["stats"]
        line = (f"rank {r['rank']} stages {r['stages']}: {s['offloads']} offloads "
                f"({_mib(s['offloaded_bytes'])}), {s['reloads']} reloads, {s['recomputes']} "
                f"recomputes; peak resident saved activations {_mib(s['peak_resident_bytes'])}")
        if plain:
            line += f" (without offload {_mib(plain[i]['stats']['peak_resident_bytes'])})"
        print(line)
        timing = f"  step {r['step_seconds'] * 1e3:.1f} ms"
        if r["peak_allocated_bytes"] is not None:
            timing += f", torch.cuda.max_memory_allocated {_mib(r['peak_allocated_bytes'])}"
        if plain:
            p = plain[i]
            timing += f"; without offload step {p['step_seconds'] * 1e3:.1f} ms"
            if p["peak_allocated_bytes"] is not None:
                timing += f", max_memory_allocated {_mib(p['peak_allocated_bytes'])}"
        print(timing)
        if r["losses"]:
            print(f"  loss per microbatch: {', '.join(f'{v:.6f}' for v in r['losses'])}")
        ok &= r["grads_equal"] and r["losses_equal"]
    print("loss and gradients equal the single-process reference" if ok else
          "MISMATCH: the pipeline's loss or gradients differ from the single-process reference")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
