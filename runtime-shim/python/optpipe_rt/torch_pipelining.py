"""Running the exported PyTorch pipelining CSV (`optpipe-compile --export-torch-csv`) with optpipe's
offload decisions.

The CSV has compute tokens only (`0F3`, `0I3`, `0W3`, `0B3`; no offload token exists), so the
offloads and reloads come from the `.opsched` of the same compile. `offload_plan` lines the two up:
for each compute op of a rank it lists the transfers the schedule issues right after it, in the
shim's own issue order. A loop
that executes the CSV (or `torch.distributed.pipelining`'s runtime, through its per-action hooks)
calls `OffloadDriver.before(op, stage, mb)` / `after(op, stage, mb)` around each compute op and
`before_backward` / `after_backward` around each backward, with a `SavedActivations` store holding
the saved tensors. `optpipe_rt.torch.PipelineSchedule` does all of this inside torch's runtime.
No torch import here: the plan is plain Python and tested without torch.
"""

import re

from . import Op

_TOKEN = re.compile(r"^(\d+)([FIWB])(\d+)$")


def load_csv_file(path, dialect="2.6"):
    with open(path) as f:
        return load_csv(f.read(), dialect)


def load_csv(text, dialect="2.6"):
    """Per rank, the compute actions in step order as (op, stage, microbatch); empty cells skipped.
    2.6 tokens: F, I (backward input, optpipe B), W, B (full backward, optpipe BW); 2.5: F, B
    (backward input), W."""
    kinds = {"F": "F", "I": "B", "W": "W", "B": "BW"} if dialect != "2.5" else \
        {"F": "F", "B": "B", "W": "W"}
    ranks = []
    for line in text.strip("\n").split("\n"):
        actions = []
        for cell in line.split(","):
            cell = cell.strip()
            if not cell:
                continue
            match = _TOKEN.match(cell)
            if not match or match.group(2) not in kinds:
                raise ValueError(f"unknown pipelining token {cell!r}")
            actions.append((kinds[match.group(2)], int(match.group(1)), int(match.group(3))))
        ranks.append(actions)
    return ranks


def offload_plan(schedule, rank, csv_actions=None):
    """{(op, stage, mb) or None: [("OFFLOAD"|"RELOAD", stage, mb), ...]}: the transfers the
    schedule issues after each compute op (None: before the first), in the shim's issue order
    (`Schedule.issue_order`: each transfer right after the last compute op that ends by its
    predicted start), the order the C runner walks and the host pool is sized in. When
    `csv_actions` (one rank's `load_csv` row) is given, checks that it runs the schedule's compute
    ops in its order (a 2.5 CSV's B then W stands for a fused BW). R has no CSV token: it is
    issued like a transfer, after the compute op before it (("R", stage, mb) in that op's list),
    so the recompute runs where the schedule puts it and allocates when the schedule says."""
    plan = {None: []}
    compute = []
    issuer = None  # the last compute op issued, R aside
    actions = schedule.actions(rank)
    for index in schedule.issue_order(rank):
        op, stage, mb = actions[index][:3]
        if op in ("OFFLOAD", "RELOAD", "R"):
            plan[issuer].append((op, stage, mb))
        elif op != "R":
            issuer = (op, stage, mb)
            compute.append(issuer)
            plan[issuer] = []
    if csv_actions is not None:
        expanded = []
        for op, stage, mb in compute:
            expanded += [("B", stage, mb), ("W", stage, mb)] if op == "BW" and \
                ("BW", stage, mb) not in csv_actions else [(op, stage, mb)]
        if list(csv_actions) != expanded:
            raise ValueError(f"rank {rank}: the CSV's compute order differs from the schedule's")
    return plan


class OffloadDriver:
    """Issues a rank's offloads/reloads from `offload_plan` through an `optpipe_rt.Rank` engine,
    with segments from a `SavedActivations` store (optpipe_rt.saved_activations: its
    offload_segments, offload_complete and reload_segments), as the shim's runner does, and runs
    the schedule's R there too (`recompute(stage, mb)`, by default the store's recompute when it
    still needs one). Call `before(op, stage, mb)` and `after(op, stage, mb)` around each compute
    op of the loop (op as the CSV names it in optpipe's terms: F, B, W or BW) and
    `before_backward` / `after_backward` around each backward.

    An offloaded activation's device copy is freed (`offload_complete`) once its copy has ended,
    seen around each op, and at the latest before the first op or reload that the schedule starts
    after the offload's predicted end: the memory fence, so device memory stays within what the
    schedule predicts whatever the real copy speed."""

    def __init__(self, rank, offloader, plan, recompute=None):
        self.rank, self.offloader, self.plan = rank, offloader, plan
        self._recompute = recompute or self._recompute_in_store
        self.offloaded = set()  # until the backward releases it
        self._copying = {}      # (stage, mb) -> predicted end, while its device copy is held
        actions = rank.schedule.actions(rank.rank)
        self._starts = {(op, stage, mb): start for op, stage, mb, start, _, _ in actions}
        self._offload_ends = {(stage, mb): end for op, stage, mb, _, end, _ in actions
                              if op == "OFFLOAD"}
        self._run(None)

    def _settle(self, fence=None):
        """Frees the device copies whose offload has ended; first waits for those the schedule
        ends by `fence` (a predicted start)."""
        for key, end in list(self._copying.items()):
            if fence is not None and end <= fence + 1e-9 * (1 + abs(fence)):
                self.rank.synchronize(*key)
            elif not self.rank.done(*key):
                continue
            del self._copying[key]
            self.offloader.offload_complete(*key)

    def _run(self, key):
        for op, stage, mb in self.plan.get(key, []):
            if op == "R":
                self._settle(self._starts[("R", stage, mb)])  # R allocates: the memory fence
                self._recompute(stage, mb)
            elif op == "OFFLOAD":
                self.rank.offload_segments(stage, mb, self.offloader.offload_segments(stage, mb))
                self.offloaded.add((stage, mb))
                self._copying[(stage, mb)] = self._offload_ends[(stage, mb)]
            else:
                self._settle(self._starts[("RELOAD", stage, mb)])
                self.rank.reload_segments(stage, mb, self.offloader.reload_segments(stage, mb))

    def _recompute_in_store(self, stage, microbatch):
        if self.offloader.needs_recompute(stage, microbatch):
            self.offloader.recompute(stage, microbatch)

    def _compute_key(self, op, stage, microbatch, fused_part):
        # A 2.5 CSV runs the schedule's fused BW as B then W: B starts it, W ends it.
        key = (op, stage, microbatch)
        return ("BW", stage, microbatch) if key not in self._starts and op == fused_part else key

    def before(self, op, stage, microbatch):
        """Call before each compute op: the memory fence for the allocations it makes."""
        self._settle(self._starts.get(self._compute_key(op, stage, microbatch, "B")))

    def after(self, op, stage, microbatch):
        """Call after each compute op: issues the transfers the schedule starts after it."""
        self._settle()
        self._run(self._compute_key(op, stage, microbatch, "W"))

    def before_backward(self, stage, microbatch):
        if (stage, microbatch) in self.offloaded:
            self.rank.wait(stage, microbatch)

    def after_backward(self, stage, microbatch):
        if (stage, microbatch) in self.offloaded:
            self.rank.release(stage, microbatch)
            self.offloaded.discard((stage, microbatch))


__all__ = ["load_csv", "load_csv_file", "offload_plan", "OffloadDriver", "Op"]
