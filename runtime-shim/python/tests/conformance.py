"""The conformance suite's harness: each model of conformance_models.py through the documented loop
(profile_stages -> optpipe-compile at a budget that forces offloads, or recomputes, or none ->
optpipe_rt.torch.PipelineSchedule on 4 gloo CPU processes), with what every rank measured beside
what the schedule predicted for it.

    python conformance.py [MODEL ...]
        # prints the measured / predicted table of docs/benchmarks.md
    python conformance.py --device cuda [MODEL ...]
        # one process, the 4 stages on one rank of one device (tools/gpu-check.sh): the store's
        # peak and torch.cuda.max_memory_allocated against the prediction, the step against the
        # makespan of the profile measured on that device; the Hugging Face models need
        # transformers (runtime-shim/python/requirements.txt), the MLP does not
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import conformance_models as models  # noqa: E402
from built_tools import tool  # noqa: E402
from gloo_group import init_single_process, run_on_ranks  # noqa: E402

RTOL = 1e-5
# A gradient may differ from the reference by this fraction of its tensor's largest element: the
# pipeline adds microbatches in its schedule's order, and a reloaded or recomputed activation
# sits at another address, where the CPU's BLAS may round a product differently. A wrong tensor
# (another microbatch's, a stale or torn copy) is off by the order of that largest element.
SCALE_TOL = 1e-4
LINK_GBPS = 5.0       # the host link of the offloading cases
STEPS = 2             # the first warms up; the second is measured


def profile_model(name, path, device="cpu", chunks_per_rank=1):
    """Measures the model's stages with profile_stages (one microbatch), with a host link."""
    from optpipe_rt.torch import profile_stages
    torch.manual_seed(0)
    if device == "cpu":
        torch.set_num_threads(1)
    stages, batch, _, _ = models.build(name)
    stages = [module.to(device) for module in stages]
    return profile_stages(stages, batch.chunk(models.MICROBATCHES)[0].to(device),
                          microbatches=models.MICROBATCHES, budget_bytes="1GiB",
                          chunks_per_rank=chunks_per_rank, offload_gb_per_s=LINK_GBPS, warmup=2,
                          iterations=5, name=name, output=path)


def case_profiles(profile):
    """{case: profile} for the three cases of a measured profile: "plain" (its budget: no
    transfer), "offload" (room for 1.5 of rank r's activations beside its static bytes, one of
    each stage it hosts and half its largest; a 5 GB/s link: offloads) and "recompute" (the same
    budget, no link: recomputes)."""
    tight = json.loads(json.dumps(profile))
    per_rank = tight["memory"]["per_rank"]
    ranks = tight["pipeline"]["ranks"]
    for entry in per_rank:
        r = entry["rank"]
        activations = [s["activation_bytes"] for s in tight["stages"] if s["index"] % ranks == r]
        # Room for 1.5 of the rank's activations (one of each stage it hosts, and half of its
        # largest): 1F1B holds up to R at once, a zero-bubble order more.
        entry["budget_bytes"] = entry["static_bytes"] + sum(activations) + max(activations) // 2
    no_link = json.loads(json.dumps(tight))
    del no_link["offload"]
    return {"plain": profile, "offload": tight, "recompute": no_link}


def compile_schedule(profile_path, schedule_path, method="auto", check=True):
    """The compiled JSON schedule; None when no schedule fits (exit 3) and check is False."""
    done = subprocess.run([tool("optpipe-compile"), profile_path, "--method", method, "-q",
                           "--time-limit", "20", "--threads", "2", "-o", schedule_path])
    if done.returncode == 3 and not check:
        return None
    done.check_returncode()
    with open(schedule_path, encoding="utf-8") as f:
        return json.load(f)


def predicted_activation_peaks(schedule, profile):
    """Per rank, the schedule's predicted peak of activation bytes (its peak less static bytes)."""
    static = {e["rank"]: e["static_bytes"] for e in profile["memory"]["per_rank"]}
    return [r["peak_bytes"] - static[r["rank"]] for r in schedule["ranks"]]


def _error(a, b, magnitude):
    """How far a gradient is from the reference's, in units of what rounding allows: at most 1
    when each element is within RTOL of the sum of its microbatch contributions' magnitudes, or
    within SCALE_TOL of the tensor's largest element."""
    scale = max(float(b.abs().max()), 1e-30)
    allowed = torch.maximum(RTOL * magnitude, torch.full_like(magnitude, SCALE_TOL * scale))
    return float(((a - b).abs() / allowed).max()) if a.numel() else 0.0


def _reference(stages, batch, target, loss_fn):
    """Losses per microbatch; per parameter, the gradient as torch's schedules scale it (summed
    over microbatches, divided by their number) and the sum of the contributions' magnitudes."""
    losses = []
    params = [list(m.parameters()) for m in stages]
    sums = [[torch.zeros_like(p) for p in ps] for ps in params]
    magnitudes = [[torch.zeros_like(p) for p in ps] for ps in params]
    for xs, ys in zip(batch.chunk(models.MICROBATCHES), target.chunk(models.MICROBATCHES)):
        out = xs
        for module in stages:
            module.zero_grad(set_to_none=True)
            out = module(out)
        loss = loss_fn(out, ys)
        loss.backward()
        losses.append(loss.item())
        for ps, total, magnitude in zip(params, sums, magnitudes):
            for p, t, m in zip(ps, total, magnitude):
                if p.grad is not None:
                    t += p.grad
                    m += p.grad.abs()
    scale = 1 / models.MICROBATCHES
    return losses, [[(t * scale, m * scale) for t, m in zip(total, magnitude)]
                    for total, magnitude in zip(sums, magnitudes)]


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
    worst = 0.0
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
        errors = [_error(p.grad, ref, magnitude) for s in mine
                  for p, (ref, magnitude) in zip(stages[s].parameters(), ref_grads[s])]
        worst = max([worst] + errors)
        grads_equal &= all(error <= 1 for error in errors)
        losses_equal &= (len(losses) == (sched.microbatches if sched.stages - 1 in mine else 0)
                         and all(abs(a.item() - b) <= RTOL * abs(b)
                                 for a, b in zip(losses, ref_losses)))
    if job.get("write_profile"):
        pipeline.write_profile(job["write_profile"], name=f"{job['model']}-measured")
    stats = vars(pipeline.offload_stats())
    result = {"rank": rank, "grads_equal": grads_equal, "losses_equal": losses_equal,
              "grad_error": worst,
              "stats": stats, "scheduled": vars(pipeline.scheduled),
              "planned_pool_bytes": sched.rank(rank)["host_pool_bytes"],
              "step_seconds": seconds[-1], "predicted_makespan": pipeline.predicted_makespan}
    pipeline.close()
    return result


def _run_jobs(rank, jobs):
    return [_run_job(rank, job) for job in jobs]


def run_jobs(jobs, ranks=models.STAGES):
    """Runs each job ({"model", "schedule" (JSON), "profile", optional "offload",
    "write_profile"}) in one group of `ranks` gloo processes: per job, each rank's result."""
    per_rank = run_on_ranks(ranks, _run_jobs, jobs)
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
            "peak, per rank | worst | host pool peak / planned | step on CPU / predicted | "
            "gradient error / allowed |",
            "|---|---|---|---|---|---|---|---|---|"]
    for (name, case, _, spec, _, schedule), ranks in zip(prepared, results):
        predicted = predicted_activation_peaks(schedule, spec)
        ratios = [r["stats"]["peak_resident_bytes"] / p if p else 0.0
                  for r, p in zip(ranks, predicted)]
        moved = (sum(r["stats"]["offloads"] for r in ranks),
                 sum(r["stats"]["recomputes"] for r in ranks))
        pools = [r["stats"]["host_pool_peak_bytes"] / r["planned_pool_bytes"]
                 for r in ranks if r["planned_pool_bytes"]]
        pool = f"{max(pools):.3f}" if pools else "–"
        step = max(r["step_seconds"] for r in ranks) * 1e3 / ranks[0]["predicted_makespan"]
        rows.append(f"| {name} | {case} | {schedule['method']} | {moved[0]} / {moved[1]} | "
                    f"{' '.join(f'{x:.3f}' for x in ratios)} | {max(ratios):.3f} | "
                    f"{pool} | {step:.2f} | "
                    f"{max(r['grad_error'] for r in ranks):.2g} |")
    return "\n".join(rows)


def single_process(names, device):
    """The models on one rank of `device` in this process (the 4 stages as 4 chunks of one rank):
    per case, the store's peak and the device allocator's peak beside the prediction, and the
    step time beside the predicted makespan. Returns the table's lines."""
    from torch.distributed.pipelining import PipelineStage
    from optpipe_rt.torch import PipelineSchedule

    device = torch.device(device)
    cuda = device.type == "cuda"
    init_single_process()
    rows = ["| model | case | method | offloads / recomputes | store peak / predicted | "
            "allocator peak / (predicted + gradients) | step / predicted |",
            "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="optpipe-conformance-") as scratch:
        for name in names:
            measured = profile_model(name, os.path.join(scratch, f"{name}.json"), device,
                                     chunks_per_rank=models.STAGES)
            for case, spec in case_profiles(measured).items():
                profile_path = os.path.join(scratch, f"{name}-{case}.json")
                with open(profile_path, "w", encoding="utf-8") as f:
                    json.dump(spec, f)
                schedule_path = os.path.join(scratch, f"{name}-{case}.schedule.json")
                schedule = compile_schedule(profile_path, schedule_path, check=False)
                if schedule is None:
                    rows.append(f"| {name} | {case} | no schedule fits the budget | | | | |")
                    continue
                stages, batch, target, loss_fn = models.build(name)
                stages = [module.to(device) for module in stages]
                batch, target = batch.to(device), target.to(device)
                pipeline = PipelineSchedule(
                    [PipelineStage(m, s, models.STAGES, device) for s, m in enumerate(stages)],
                    schedule_path, models.MICROBATCHES, loss_fn=loss_fn, profile=profile_path)
                gradients = sum(p.numel() * p.element_size() for m in stages
                                for p in m.parameters())
                for _ in range(STEPS):
                    for module in stages:
                        module.zero_grad(set_to_none=True)
                    if cuda:
                        torch.cuda.synchronize(device)
                        torch.cuda.reset_peak_memory_stats(device)
                        base = torch.cuda.memory_allocated(device)
                    start = time.perf_counter()
                    pipeline.step(batch, target=target, losses=[])
                    if cuda:
                        torch.cuda.synchronize(device)
                    seconds = time.perf_counter() - start
                stats = pipeline.offload_stats()
                pipeline.close()
                predicted = predicted_activation_peaks(schedule, spec)[0]
                allocator = "–"
                if cuda:
                    peak = torch.cuda.max_memory_allocated(device) - base
                    allocator = f"{peak / (predicted + gradients):.3f}"
                rows.append(f"| {name} | {case} | {schedule['method']} | {stats.offloads} / "
                            f"{stats.recomputes} | {stats.peak_resident_bytes / predicted:.3f} | "
                            f"{allocator} | "
                            f"{seconds * 1e3 / pipeline.predicted_makespan:.2f} |")
    return rows


def _available(names):
    try:
        import transformers  # noqa: F401
        return names
    except ImportError:
        print("transformers is not installed here (runtime-shim/python/requirements.txt pins "
              "the version): the Hugging Face models are skipped, the MLP runs", file=sys.stderr)
        return [name for name in names if name == "mlp"]


def main(argv):
    device = None
    if argv[:1] == ["--device"]:
        device, argv = argv[1], argv[2:]
    names = _available(argv or list(models.MODELS))
    if device is not None:
        print("\n".join(single_process(names, device)))
        return 0
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
