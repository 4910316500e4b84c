"""optpipe schedules inside torch.distributed.pipelining, offloads and recomputes included.

    from optpipe_rt.torch import PipelineSchedule
    stage = PipelineStage(module, stage_index, num_stages, device)     # as for torch's schedules
    schedule = PipelineSchedule([stage], "model.opsched", n_microbatches=8, loss_fn=loss_fn)
    schedule.step(x, target=y, losses=losses)       # on every rank, as torch's schedules
    schedule.offload_stats()                        # what the step offloaded, reloaded, recomputed

`PipelineSchedule` runs this rank's part of an optpipe schedule: the compute order (F, B as
torch's I, W, fused BW as torch's B) through torch's pipeline runtime, which adds the sends and
receives, and the schedule's OFFLOAD, RELOAD and R actions where the schedule puts them: each
transfer is issued right after the compute op it follows in the schedule (as the compiler's
simulator issues it), on the shim's offload engine (CUDA copy streams on a GPU, the CPU backend
otherwise), with the activations autograd saved, held through saved-tensor hooks
(`optpipe_rt.saved_activations`). A microbatch the schedule recomputes keeps only its checkpoint
in the forward and runs its forward again before its backward.

It builds on `_PipelineScheduleRuntime`, which torch keeps private, so it supports the torch
versions in runtime-shim/python/requirements.txt (SUPPORTED_TORCH) and refuses others.
"""

import contextlib
import dataclasses
import glob
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile

import torch
from torch.distributed.pipelining import schedules as _schedules

from . import Rank, Schedule
from .saved_activations import SavedActivations
from .schedule_watch import ScheduleWatch, schedule_makespan
from .torch_pipelining import OffloadDriver, offload_plan
from .training_profile import StepRecorder, build_profile
from .torch_profile import profile_stages  # noqa: F401 (optpipe_rt.torch.profile_stages)

logger = logging.getLogger("optpipe_rt")

SUPPORTED_TORCH = ((2, 15),)  # (major, minor) releases whose pipelining runtime this is tested on

__all__ = ["PipelineSchedule", "OffloadStats", "build_profile", "ScheduleMismatch",
           "ScheduleSwitch", "SUPPORTED_TORCH", "check_stages", "load_schedule",
           "schedule_from_bytes", "schedule_makespan", "profile_sha256"]

_TORCH_OPS = {"F": _schedules.FORWARD, "B": _schedules.BACKWARD_INPUT,
              "W": _schedules.BACKWARD_WEIGHT, "BW": _schedules.FULL_BACKWARD}


class ScheduleMismatch(ValueError):
    """The schedule does not fit the stages, the microbatch count or the profile given."""


@dataclasses.dataclass
class OffloadStats:
    """What one `step()` did on this rank beyond compute."""

    offloads: int = 0
    reloads: int = 0
    recomputes: int = 0
    offloaded_bytes: int = 0        # device to host
    reloaded_bytes: int = 0         # host to device
    peak_resident_bytes: int = 0    # saved activations on the device (measured by the hooks)
    host_pool_peak_bytes: int = 0
    host_pool_bytes: int = 0        # the pool's size (0: no offload engine opened)


def _torch_version():
    return tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def profile_sha256(profile):
    """SHA-256 of a profile's canonical JSON (keys sorted, no whitespace, floating-point numbers
    as "%.17g"), as optpipe computes it: `profile` is a path or an already parsed dict."""
    if not isinstance(profile, dict):
        with open(profile, encoding="utf-8") as f:
            profile = json.load(f)
    return hashlib.sha256(_canonical_json(profile).encode("utf-8")).hexdigest()


def _canonical_json(value):
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(key, ensure_ascii=False) + ":" +
                              _canonical_json(value[key]) for key in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical_json(item) for item in value) + "]"
    if isinstance(value, float):
        return "%.17g" % value
    return json.dumps(value, ensure_ascii=False)


def _optpipe_tool():
    env = os.environ.get("OPTPIPE_BIN")
    if env:
        return env
    found = shutil.which("optpipe")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    candidates = sorted(glob.glob(os.path.join(repo, "build*", "bin", "optpipe")))
    if candidates:
        return candidates[0]
    raise FileNotFoundError("a JSON schedule is converted by the `optpipe` tool, which was not "
                            "found: set OPTPIPE_BIN, put it on PATH, or pass the .opsched written "
                            "by `optpipe-compile --format bin`")


def load_schedule(schedule, profile=None):
    """An `optpipe_rt.Schedule` from a .opsched path, a JSON schedule path (converted with
    `optpipe convert`, which needs the profile it was compiled for) or a Schedule."""
    if isinstance(schedule, Schedule):
        return schedule
    with open(schedule, "rb") as f:
        return schedule_from_bytes(f.read(), schedule, profile)


def schedule_from_bytes(data, name, profile=None):
    """An `optpipe_rt.Schedule` from the bytes of a .opsched or of a JSON schedule (converted
    with `optpipe convert` and `profile`); `name` says where the bytes came from in errors."""
    if data[:8] == b"OPSCHED\0":
        return Schedule(data)
    if profile is None or isinstance(profile, dict):
        raise ScheduleMismatch(f"{name}: a JSON schedule needs profile= (the path of the "
                               "profile it was compiled for) to be converted; or pass the .opsched "
                               "written by `optpipe-compile --format bin`")
    try:
        budgets = {rank["budget_bytes"] for rank in json.loads(data).get("ranks", [])}
    except (ValueError, AttributeError, KeyError, TypeError, RecursionError) as error:
        raise ScheduleMismatch(f"{name}: neither an .opsched nor a JSON schedule: "
                               f"{error}") from None
    with tempfile.TemporaryDirectory(prefix="optpipe-") as scratch:
        source, out = (os.path.join(scratch, "schedule" + ext) for ext in (".json", ".opsched"))
        with open(source, "wb") as f:
            f.write(data)
        command = [_optpipe_tool(), "convert", os.fspath(profile), source, out]
        if len(budgets) == 1:  # the budget it was compiled for, which may be --memory-budget's
            command += ["--memory-budget", str(budgets.pop())]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ScheduleMismatch(f"{name}: optpipe convert refused it (exit "
                                   f"{done.returncode}): "
                                   f"{done.stderr.strip().replace(source, os.fspath(name))}")
        with open(out, "rb") as f:
            return Schedule(f.read())


def check_stages(sched, stages, n_microbatches, profile=None):
    """Raises ScheduleMismatch unless `sched` (an optpipe_rt.Schedule) is for the pipeline these
    stages (this rank's PipelineStage objects, or anything with their group_size, group_rank,
    num_stages and stage_index) make: world size, stage count, this rank's stages, microbatches,
    and, when `profile` is given, the profile's hash."""
    first = stages[0]
    where = f"schedule ({sched.method}, {sched.ranks} ranks, {sched.stages} stages)"
    if first.group_size != sched.ranks:
        raise ScheduleMismatch(f"{where} is for {sched.ranks} ranks; the pipeline group has "
                               f"{first.group_size}")
    if first.num_stages != sched.stages:
        raise ScheduleMismatch(f"{where} has {sched.stages} stages; the PipelineStages say "
                               f"{first.num_stages}")
    if n_microbatches != sched.microbatches:
        raise ScheduleMismatch(f"{where} is for {sched.microbatches} microbatches; "
                               f"n_microbatches is {n_microbatches}")
    rank = first.group_rank
    mine = sorted(s for s in range(sched.stages) if sched.stage(s)["rank"] == rank)
    given = sorted(stage.stage_index for stage in stages)
    if mine != given:
        raise ScheduleMismatch(f"{where} places stages {mine} on rank {rank}; this rank's "
                               f"PipelineStages are {given} (another placement?)")
    if profile is not None and profile_sha256(profile) != sched.profile_sha256:
        raise ScheduleMismatch(f"{where} was compiled for another profile (sha256 "
                               f"{sched.profile_sha256[:12]}..., the profile given hashes to "
                               f"{profile_sha256(profile)[:12]}...)")


class _Engine:
    """The shim's offload engine for this rank, opened at the first offload. Its pinned host pool
    is the schedule's (`host_pool_bytes` of the rank: the pool replayed in the runner's issue
    order), and each slot takes the bytes the schedule planned for that offload, so the pool serves
    exactly the requests that sized it."""

    def __init__(self, schedule, rank, device, host_pool_bytes):
        self.schedule, self.rank = schedule, rank
        self._device, self._pool_bytes = device, host_pool_bytes
        self._rank = None
        self._bytes = {}
        self.stats = OffloadStats()

    def _open(self):
        cuda = self._device.type == "cuda"
        stream = torch.cuda.current_stream(self._device).cuda_stream if cuda else None
        self._rank = Rank(self.schedule, self.rank, backend="cuda" if cuda else "cpu",
                          host_pool_bytes=self._pool_bytes, cuda_device=self._device.index or 0,
                          cuda_stream=stream)

    def offload_segments(self, stage, microbatch, segments):
        if self._rank is None:
            self._open()
        self._rank.offload_segments(stage, microbatch, segments)
        nbytes = self._bytes[(stage, microbatch)] = sum(n for _, n in segments)
        self.stats.offloads += 1
        self.stats.offloaded_bytes += nbytes
        used, capacity = self._rank.host_pool_usage()
        self.stats.host_pool_peak_bytes = max(self.stats.host_pool_peak_bytes, used)
        self.stats.host_pool_bytes = capacity

    def reload_segments(self, stage, microbatch, targets):
        self._rank.reload_segments(stage, microbatch, targets)
        self.stats.reloads += 1
        self.stats.reloaded_bytes += self._bytes.pop((stage, microbatch))

    def __getattr__(self, name):  # wait, synchronize, done, release: only after an offload
        if name.startswith("_") or self._rank is None:
            raise AttributeError(name)
        return getattr(self._rank, name)

    def close(self):
        if self._rank is not None:
            self._rank.close()
            self._rank = None


@dataclasses.dataclass
class ScheduleSwitch:
    """A change of schedule between steps (`PipelineSchedule.switches`)."""

    step: int                    # the index of the first step run with the new schedule
    method: str                  # the new schedule's method, as the compiler recorded it
    makespan: float              # its predicted step time, in the schedule's time unit
    previous_method: str
    previous_makespan: float
    digest: str                  # SHA-256 of the file's bytes that every rank agreed on

    @property
    def predicted_gain(self):
        """The predicted step time saved, as a fraction of the previous schedule's."""
        return 1.0 - self.makespan / self.previous_makespan if self.previous_makespan else 0.0


class PipelineSchedule(_schedules._PipelineScheduleRuntime):
    """Runs an optpipe schedule on this rank's `PipelineStage`s.

    Args:
        stages: this rank's stages (one per chunk the schedule places on this rank).
        schedule: a .opsched path (`optpipe-compile --format bin`), a JSON schedule path
            (with `profile`), or an `optpipe_rt.Schedule`.
        n_microbatches: must equal the schedule's microbatch count.
        loss_fn: as for torch's schedules.
        profile: the profile the schedule was compiled for (path or parsed dict); when given, a
            schedule compiled for another profile is refused. Needed with a JSON schedule.
        host_pool_bytes: the pinned host pool's size (0: the schedule's, sized in the runner's
            issue order; each offload takes the slot the schedule planned for it).
        offload: False runs the compute order alone, skipping the schedule's offloads, reloads
            and recomputes (to compare memory and step time with and without them).
        watch: online incumbents: before every `watch_every`-th step, read the schedule's path
            again and switch to the schedule it now holds (the one `optpipe-compile -o` replaces
            with each better schedule it finds) when it opens, fits these stages, and every rank
            of the pipeline reads the same bytes. Every rank must pass the same `watch` and
            `watch_every` (the ranks agree in a collective at those steps).
        watch_every: steps between two looks at the file (default 1).
        scale_grads: as for torch's schedules.
    Raises ScheduleMismatch before the first step when the schedule is for another world size,
    stage count or placement, microbatch count or profile.
    """

    def __init__(self, stages, schedule, n_microbatches, loss_fn=None, *, profile=None,
                 host_pool_bytes=0, offload=True, watch=False, watch_every=1, scale_grads=True,
                 **kwargs):
        if _torch_version() not in SUPPORTED_TORCH:
            supported = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_TORCH)
            raise RuntimeError(f"optpipe_rt.torch supports torch {supported}, not "
                               f"{torch.__version__}: it builds on torch's private pipelining "
                               "runtime; install a supported version "
                               "(runtime-shim/python/requirements.txt)")
        if not stages:
            raise ValueError("stages: give this rank's PipelineStage objects")
        if watch and isinstance(schedule, Schedule):
            raise ValueError("watch=True needs the schedule's path (the file optpipe-compile "
                             "writes), not an opened Schedule")
        if not isinstance(watch_every, int) or watch_every < 1:
            raise ValueError(f"watch_every must be a positive integer, not {watch_every!r}")
        digest = None
        if isinstance(schedule, Schedule):
            sched = schedule
        else:
            with open(schedule, "rb") as f:
                data = f.read()
            digest = hashlib.sha256(data).hexdigest()
            sched = schedule_from_bytes(data, schedule, profile)
        check_stages(sched, stages, n_microbatches, profile)
        self._losses_by_microbatch = {}
        super().__init__(stages, n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads,
                         **kwargs)
        self._offload, self._host_pool_bytes = offload, host_pool_bytes
        self._device = torch.device(stages[0].device)
        self._saved = SavedActivations({s.stage_index: s.submod for s in stages}, self._device)
        self._engine = None
        self._install(sched)
        self._driver = None
        self._history = []
        self._restore = []
        self.switches = []
        self._steps = 0
        self._group = stages[0].group
        self._recorder = StepRecorder()
        self._pending_events = []  # CUDA (op, stage, start event, end event) of this step
        self._watch = None
        if watch:
            self._watch_every = watch_every
            self._watch = ScheduleWatch(
                schedule, lambda data: schedule_from_bytes(data, schedule, profile),
                lambda new: check_stages(new, stages, n_microbatches, profile), digest)
        for stage in stages:
            self._attach(stage)

    def _install(self, sched):
        """Makes `sched` the schedule the next step runs: torch's action lists with their
        communication, this rank's offload plan and recomputes, and an offload engine for it."""
        rank = self._stages[0].group_rank
        orders = {r: [_schedules._Action(stage, _TORCH_OPS[op], mb)
                      for op, stage, mb, *_ in sched.actions(r) if op in _TORCH_OPS]
                  for r in range(sched.ranks)}
        self.pipeline_order = orders
        self._prepare_schedule_with_comms(orders)

        actions = sched.actions(rank)
        if not self._offload:
            actions = [action for action in actions if action[0] in _TORCH_OPS]
        self._recomputed = {(stage, mb) for op, stage, mb, *_ in actions if op == "R"}
        self.scheduled = OffloadStats(
            offloads=sum(op == "OFFLOAD" for op, *_ in actions),
            reloads=sum(op == "RELOAD" for op, *_ in actions),
            recomputes=len(self._recomputed))
        self._plan = offload_plan(sched, rank) if self._offload else {None: []}
        if self._engine is not None:
            self._engine.close()
        self._engine = _Engine(sched, rank, self._device, self._host_pool_bytes)
        self.optpipe_schedule = sched
        self.predicted_makespan = schedule_makespan(sched)

    def _agreed(self, digest):
        """Whether every rank of the pipeline proposes `digest` (a collective on every rank)."""
        backend = torch.distributed.get_backend(self._group)
        device = self._device if backend != "gloo" else torch.device("cpu")
        mine = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.uint8, device=device)
        every = [torch.empty_like(mine) for _ in range(self._stages[0].group_size)]
        torch.distributed.all_gather(every, mine, group=self._group)
        return all(torch.equal(other, mine) for other in every)

    def _switch_if_agreed(self):
        candidate = self._watch.poll()
        proposal = candidate.digest if candidate is not None else self._watch.running_digest
        if not self._agreed(proposal) or candidate is None:
            return
        before = (self.optpipe_schedule.method, self.predicted_makespan)
        self._install(candidate.schedule)
        self._watch.running(candidate.digest)
        switch = ScheduleSwitch(self._steps, self.optpipe_schedule.method,
                                self.predicted_makespan, *before, candidate.digest)
        self.switches.append(switch)
        unit = self.optpipe_schedule.time_unit
        logger.info("optpipe_rt: rank %d: step %d runs %s's schedule from %s: predicted step "
                    "%.3f %s, was %.3f %s (%s), predicted gain %.1f%%", self.rank, switch.step,
                    switch.method, self._watch.path, switch.makespan, unit,
                    switch.previous_makespan, unit, switch.previous_method,
                    100 * switch.predicted_gain)

    def _attach(self, stage):
        s = stage.stage_index
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk
        backward_weight = stage.backward_weight_one_chunk

        def context(info):
            if info.is_metadata_inference:
                return contextlib.nullcontext()
            key = (info.stage_index, info.microbatch_index)
            return self._saved.forward(*key, recompute=key in self._recomputed)

        def forward_one_chunk(mb, *args, **kwargs):
            self._driver.before("F", s, mb)
            with self._timed("F", s):
                output = forward(mb, *args, **kwargs)
            if (s, mb) in self._saved._entries:
                self._recorder.saved(s, self._saved.held_bytes(s, mb), (s, mb) in self._recomputed)
            self._driver.after("F", s, mb)
            return output

        def backward_one_chunk(mb, loss=None, full_backward=True, last_backward=False):
            op = "BW" if full_backward else "B"
            self._driver.before(op, s, mb)
            self._driver.before_backward(s, mb)
            self._recompute(s, mb)  # where the schedule put it, unless the plan had no R
            with self._timed(op, s):
                backward(mb, loss=loss, full_backward=full_backward, last_backward=last_backward)
            self._driver.after_backward(s, mb)
            if full_backward:
                self._saved.forget(s, mb)
            else:
                # torch keeps the whole graph until W; what no weight-gradient node reads goes now,
                # so B frees A - G as the schedule's memory model has it.
                state = stage.backward_state.get(mb)
                self._saved.release_after_input_backward(s, mb, state[1] if state else None)
                self._recorder.kept(s, self._saved.held_bytes(s, mb))
            self._driver.after(op, s, mb)

        def backward_weight_one_chunk(mb, last_backward=False):
            self._driver.before("W", s, mb)
            with self._timed("W", s):
                backward_weight(mb, last_backward=last_backward)
            self._saved.forget(s, mb)
            self._driver.after("W", s, mb)

        handle = stage.register_forward_context(context)
        stage.forward_one_chunk = forward_one_chunk
        stage.backward_one_chunk = backward_one_chunk
        stage.backward_weight_one_chunk = backward_weight_one_chunk
        self._restore.append((stage, handle))

    def _recompute(self, stage, microbatch):
        if self._saved.needs_recompute(stage, microbatch):
            with self._timed("R", stage):
                self._saved.recompute(stage, microbatch)
            self._engine.stats.recomputes += 1

    # torch's runtime keeps the last stage's losses in a list, in the order its forwards ran, and
    # reads them back by microbatch index: with those forwards out of microbatch order, which
    # optpipe's schedules may have, a backward started from another microbatch's loss (wrong
    # gradients on every rank) and `losses` came out in that order. Keyed by microbatch here.
    def _maybe_compute_loss(self, stage, output, target_mbs, mb_index, loss_kwargs=None):
        if stage.is_last and self._loss_fn is not None:
            self._losses_by_microbatch[mb_index] = self._compute_loss(
                output, target_mbs[mb_index], loss_kwargs)  # type: ignore[index]

    def _maybe_get_loss(self, stage, mb_index):
        if not (stage.is_last and self._loss_fn is not None):
            return None
        if mb_index not in self._losses_by_microbatch:
            raise RuntimeError(f"rank {self.rank}: the loss of microbatch {mb_index} is asked for "
                               "before its forward ran")
        return self._losses_by_microbatch[mb_index]

    def _update_losses(self, stages, losses):
        stages = stages if isinstance(stages, list) else [stages]
        if any(stage.is_last for stage in stages) and losses is not None:
            if len(self._losses_by_microbatch) != self._n_microbatches:
                raise RuntimeError(f"expected {self._n_microbatches} losses, got "
                                   f"{len(self._losses_by_microbatch)}")
            losses.clear()
            losses.extend(self._losses_by_microbatch[j] for j in range(self._n_microbatches))
        self._losses_by_microbatch.clear()

    @contextlib.contextmanager
    def _timed(self, op, stage):
        """Records the op's duration: host time on CPU, CUDA events (read at the step's end) on a
        GPU, so that timing does not stall the stream."""
        if self._device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending_events.append((op, stage, start, end))
        else:
            begin = self._recorder.now()
            yield
            self._recorder.add(op, stage, self._recorder.now() - begin)

    def write_profile(self, path=None, name="measured"):
        """The optpipe.profile/v1 these steps measured, on every rank (a collective: call it on
        every rank of the pipeline): each op's median time over the steps after the first, each
        stage's saved bytes (A per forward, G left after the input backward, C kept by a
        recomputed forward), with the schedule's pipeline, budgets, static bytes and link. Rank 0
        writes it to `path` (atomically) when given; `optpipe-compile` recompiles from it."""
        if not self._steps:
            raise RuntimeError("write_profile: no step has run yet")
        mine = self._recorder.summary()
        every = [None] * self._stages[0].group_size
        torch.distributed.all_gather_object(every, mine, group=self._group)
        profile = build_profile(self.optpipe_schedule, every, name)
        if path is not None and self._stages[0].group_rank == 0:
            scratch = f"{os.fspath(path)}.{os.getpid()}.tmp"
            with open(scratch, "w", encoding="utf-8") as f:
                json.dump(profile, f, indent=2)
                f.write("\n")
            os.replace(scratch, path)
        return profile

    def step(self, *args, **kwargs):
        """One iteration, as torch's schedules' step(*args, target=..., losses=...). With
        watch=True, first switches to a newer schedule when every rank agrees on it."""
        if self._watch is not None and self._steps % self._watch_every == 0:
            self._switch_if_agreed()
        self._engine.stats = OffloadStats(host_pool_bytes=self._engine.stats.host_pool_bytes)
        self._saved.reset_peak()
        self._driver = OffloadDriver(self._engine, self._saved, self._plan,
                                     recompute=self._recompute)
        self._recorder.start_step()
        try:
            result = super().step(*args, **kwargs)
        finally:
            self._driver = None
        if self._pending_events:
            torch.cuda.synchronize(self._device)
            for op, stage, start, end in self._pending_events:
                self._recorder.add(op, stage, start.elapsed_time(end) / 1e3)
            self._pending_events = []
        left = self._saved.pending()
        if left:
            raise RuntimeError(f"rank {self.rank}: the step ended with saved activations of "
                               f"(stage, microbatch) {left} never released")
        stats = self._engine.stats
        stats.peak_resident_bytes = self._saved.peak_resident_bytes
        self._history.append(stats)
        self._steps += 1
        return result

    def offload_stats(self, step=-1):
        """OffloadStats of a step (default: the last one); compare with `scheduled`, what the
        schedule plans for this rank per step."""
        if not self._history:
            raise RuntimeError("no step has run yet")
        return self._history[step]

    def close(self):
        """Detaches from the stages and closes the offload engine."""
        for stage, handle in self._restore:
            handle.remove()
            for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                stage.__dict__.pop(name, None)
        self._restore = []
        self._engine.close()
