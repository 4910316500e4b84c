"""What autograd saves during a stage's forward, held per (stage, microbatch) so that a schedule can
offload it, reload it, recompute it, and free what its backward no longer needs when the schedule's
memory model says it is free (docs/runtime-shim.md, "What the memory model counts").

`SavedActivations.forward(stage, mb)` is a context around one forward: inside it,
`torch.autograd.graph.saved_tensors_hooks` hand every tensor autograd saves to this store instead
of the autograd graph, and the backward's unpack hook takes them back from here. The store then
does what the schedule says:

- OFFLOAD (`offload_segments`): the activation's segments, one per storage its saved tensors view
  (the bytes from the first to the last they view), for the shim to copy straight into one pinned
  host slot: no packed device copy is made. `offload_complete`, once the copy has ended, drops the
  saved tensors, so the device bytes go when the D2H ends, as the simulator has them go.
  Parameters, views of parameters and module buffers are never offloaded: they are weights, not
  activations, and stay where they are. The saved stage input is an activation like any other.
- RELOAD (`reload_segments`): one device buffer per segment to copy back into; the unpack hook
  views each saved tensor out of its segment with its original dtype, shape, strides and offset.
- B (`release_after_input_backward`): after torch's input backward, the tensors that no node of
  the weight backward reads are dropped, so a B frees A - G and its W the rest (G), as the memory
  model has it. A first stage, whose input backward torch skips, keeps everything until its W.
- Recompute: a forward marked `recompute=True` keeps only its checkpoint (the stage inputs and the
  weights); `recompute(stage, mb)` runs the stage's module again on the checkpoint, with the RNG
  state of the first run, and takes the tensors it saves, in the order they were saved, as the
  originals.

`resident_bytes` counts the device bytes of saved activations the store holds, each byte once (the
union of what every held segment covers, per storage), and `peak_resident_bytes` its high-water
mark: what the schedule's memory model predicts for the rank's activations.
"""

import contextlib

import torch

SEGMENT_ALIGNMENT = 16  # a segment starts on a 16-byte boundary of its storage: any dtype views it


def packed_bytes(sizes):
    """The bytes of a host slot holding segments of `sizes`, each at a 16-byte boundary (the shim's
    offload engine packs them so, OffloadEngine::kSegmentAlignment)."""
    end = 0
    for size in sizes:
        end = -(-end // SEGMENT_ALIGNMENT) * SEGMENT_ALIGNMENT + size
    return end


def _span(tensor):
    """The bytes of its storage a tensor views: [start, end). A microbatch of a batch is a view of
    the whole batch's storage; only its own rows are its activation."""
    size = tensor.element_size()
    start = tensor.storage_offset() * size
    if tensor.numel() == 0:
        return start, start
    last = sum((n - 1) * abs(step) for n, step in zip(tensor.shape, tensor.stride()))
    return start, start + (last + 1) * size


class _Stored:
    """One saved tensor: the tensor itself while resident, or where to find it in its segment."""

    __slots__ = ("tensor", "storage_key", "dtype", "shape", "stride", "span", "weight")

    def __init__(self, tensor, weight):
        self.tensor = tensor
        self.weight = weight
        self.storage_key = tensor.untyped_storage().data_ptr()
        self.dtype, self.shape = tensor.dtype, tuple(tensor.shape)
        self.stride = tuple(tensor.stride())
        self.span = _span(tensor)


class _Segment:
    """What one entry holds of one storage: the bytes [start, end) that its tensors view, and how
    many of its saved tensors still need them."""

    __slots__ = ("storage", "start", "end", "needed", "buffer", "held", "on_host")

    def __init__(self, storage, start, end):
        self.storage, self.start, self.end = storage, start, end
        self.needed = 0
        self.on_host = False  # offloaded, not reloaded
        self.buffer = None   # the reloaded bytes, from `start` aligned down
        self.held = None     # the accounting key it is counted under while resident

    @property
    def aligned_start(self):
        return self.start - self.start % SEGMENT_ALIGNMENT


class _Entry:
    """Everything saved by one (stage, microbatch) forward."""

    def __init__(self, recompute):
        self.recompute = recompute
        self.stored = []         # _Stored per pack, in pack order (None: dropped for recompute)
        self.segments = {}       # storage key -> _Segment of the activations saved on it
        self.order = []          # storage keys in the order offload_segments lists them
        self.released = set()    # pack indices no later backward reads
        self.offloading = False  # its D2H copy is in flight
        self.on_host = False     # offloaded and not reloaded
        self.checkpoint = None   # (args, kwargs, rng states) of a recomputed forward
        self.recomputed = None   # tensors the recompute saved, in pack order
        self.recomputed_keys = {}  # pack index -> the segment key its recomputed tensor counts in


class SavedActivations:
    """The per-(stage, microbatch) store of saved tensors for one rank's stages.

    `modules` maps stage index to the stage's module; its parameters and buffers are what the
    store never treats as activations."""

    def __init__(self, modules, device=None):
        self.device = torch.device(device) if device is not None else None
        self._modules = dict(modules)
        self._weights = set()
        for module in self._modules.values():
            for tensor in list(module.parameters()) + list(module.buffers()):
                self._weights.add(tensor.untyped_storage().data_ptr())
        self._entries = {}
        self._ranges = {}     # accounting key -> {(start, end): references}
        self._union = {}      # accounting key -> bytes its ranges cover together
        self.resident_bytes = 0
        self.peak_resident_bytes = 0
        self._capturing_args = None
        self._probe = None  # ((stage, mb), indices) while read_by reads a graph's saved tensors
        self._hooks = [module.register_forward_pre_hook(self._pre_hook(stage), with_kwargs=True)
                       for stage, module in self._modules.items()]

    def close(self):
        """Removes the store's hook from the stages' modules."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    # Accounting of resident device bytes: per storage the union of the ranges held on it.
    def _hold(self, key, start, end):
        ranges = self._ranges.setdefault(key, {})
        ranges[(start, end)] = ranges.get((start, end), 0) + 1
        self._recount(key)

    def _let_go(self, key, start, end):
        ranges = self._ranges[key]
        ranges[(start, end)] -= 1
        if ranges[(start, end)] == 0:
            del ranges[(start, end)]
        self._recount(key)

    def _recount(self, key):
        covered, reach = 0, None
        for start, end in sorted(self._ranges[key]):
            if reach is None or start > reach:
                covered += end - start
                reach = end
            elif end > reach:
                covered += end - reach
                reach = end
        self.resident_bytes += covered - self._union.get(key, 0)
        if covered:
            self._union[key] = covered
        else:
            self._union.pop(key, None)
            del self._ranges[key]
        self.peak_resident_bytes = max(self.peak_resident_bytes, self.resident_bytes)

    def _count(self, segment, key):
        """Counts `segment` as resident under `key` (its storage, or its reload buffer)."""
        self._uncount(segment)
        if key[0] == "reload":
            start, end = 0, segment.end - segment.aligned_start
        else:
            start, end = segment.start, segment.end
        segment.held = (key, start, end)
        self._hold(key, start, end)

    def _uncount(self, segment):
        if segment.held is not None:
            self._let_go(*segment.held)
            segment.held = None

    def reset_peak(self):
        self.peak_resident_bytes = self.resident_bytes

    def is_weight(self, tensor):
        return tensor.untyped_storage().data_ptr() in self._weights

    def _pre_hook(self, stage):
        def hook(_module, args, kwargs):
            if self._capturing_args is not None and self._capturing_args[0] == stage:
                self._capturing_args[1].checkpoint = (args, kwargs, self._rng_state())
        return hook

    def _rng_state(self):
        cuda = self.device is not None and self.device.type == "cuda"
        return (torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if cuda else None)

    def _add(self, entry, stored, storage_key, storage):
        """Makes `stored` need its bytes of storage `storage_key` in `entry`."""
        start, end = stored.span
        segment = entry.segments.get(storage_key)
        if segment is None:
            segment = entry.segments[storage_key] = _Segment(storage, start, end)
            entry.order.append(storage_key)
        else:
            segment.start, segment.end = min(segment.start, start), max(segment.end, end)
        segment.needed += 1
        self._count(segment, (storage_key,))

    @contextlib.contextmanager
    def forward(self, stage, microbatch, recompute=False):
        """Context around the forward of (stage, microbatch): what it saves is held here."""
        key = (stage, microbatch)
        if key in self._entries:
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: forward run twice "
                               "without its backward")
        entry = self._entries[key] = _Entry(recompute)
        checkpoint_keys = set()

        def pack(tensor):
            index = len(entry.stored)
            weight = self.is_weight(tensor)
            if recompute and not weight and not self._is_checkpoint(tensor, entry, checkpoint_keys):
                entry.stored.append(None)
                return key, index
            stored = _Stored(tensor, weight)
            entry.stored.append(stored)
            if not weight:
                self._add(entry, stored, stored.storage_key, tensor.untyped_storage())
            return key, index

        def unpack(ref):
            if self._probe is not None and self._probe[0] == ref[0]:
                self._probe[1].add(ref[1])
            return self.tensor(*ref)

        self._capturing_args = (stage, entry) if recompute else None
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                yield
        finally:
            self._capturing_args = None

    @staticmethod
    def _is_checkpoint(tensor, entry, keys):
        # The checkpoint is the forward's inputs: what a recompute starts from.
        if not keys and entry.checkpoint is not None:
            args, kwargs, _ = entry.checkpoint
            for value in list(args) + list(kwargs.values()):
                if isinstance(value, torch.Tensor):
                    keys.add(value.untyped_storage().data_ptr())
        return tensor.untyped_storage().data_ptr() in keys

    def tensor(self, key, index):
        """The index-th tensor (stage, mb)'s forward saved, for the backward."""
        entry = self._entries.get(key)
        if entry is None:
            raise RuntimeError(f"stage {key[0]}, microbatch {key[1]}: saved tensors asked for "
                               "after its backward ended")
        if index in entry.released:
            raise RuntimeError(f"stage {key[0]}, microbatch {key[1]}: the weight backward read "
                               f"saved tensor {index}, which the input backward's analysis "
                               "found no weight-gradient node to need (please report this model)")
        stored = entry.stored[index]
        if stored is None:
            if entry.recomputed is None:
                raise RuntimeError(f"stage {key[0]}, microbatch {key[1]}: the backward needs the "
                                   "recomputed forward, which has not run")
            return entry.recomputed[index]
        if stored.tensor is not None:
            return stored.tensor
        segment = entry.segments[stored.storage_key]
        if segment.buffer is None:
            raise RuntimeError(f"stage {key[0]}, microbatch {key[1]}: the backward needs an "
                               "offloaded activation that was not reloaded")
        first = stored.span[0] - segment.aligned_start
        view = torch.empty(0, dtype=stored.dtype, device=segment.buffer.device)
        return view.set_(segment.buffer.untyped_storage(), first // stored.dtype.itemsize,
                         stored.shape, stored.stride)

    # OFFLOAD / RELOAD, as the shim's callbacks (offload_segments, offload_complete,
    # reload_segments).
    def offload_segments(self, stage, microbatch):
        """(stage, mb)'s activation as device segments, [(pointer, bytes), ...], for the shim to
        copy into one host slot; they stay allocated until `offload_complete`."""
        entry = self._entries[(stage, microbatch)]
        if entry.on_host or entry.offloading:
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: offloaded twice")
        out = []
        for segment in self._offloadable(entry):
            begin = segment.aligned_start
            out.append((segment.storage.data_ptr() + begin, segment.end - begin))
        entry.offloading = True
        return out

    def held_bytes(self, stage, microbatch):
        """The bytes (stage, mb)'s saved tensors still need, packed as an offload moves them: A
        right after its forward, G after its input backward."""
        entry = self._entries[(stage, microbatch)]
        return packed_bytes(s.end - s.aligned_start for s in entry.segments.values() if s.needed)

    @staticmethod
    def _offloadable(entry):
        return [entry.segments[k] for k in entry.order
                if entry.segments[k].needed and entry.segments[k].storage is not None]

    def offload_complete(self, stage, microbatch):
        """The D2H copy has ended: the device bytes of the offloaded tensors go."""
        entry = self._entries[(stage, microbatch)]
        if not entry.offloading:
            return
        entry.offloading, entry.on_host = False, True
        for segment in self._offloadable(entry):
            segment.storage, segment.on_host = None, True
            self._uncount(segment)
        for stored in entry.stored:
            if stored is not None and not stored.weight and \
                    entry.segments[stored.storage_key].on_host:
                stored.tensor = None

    def reload_segments(self, stage, microbatch, sizes=None):
        """One device buffer per offloaded segment, in `offload_segments`' order, for the H2D copy:
        their pointers. `sizes`, when given, must be the offloaded segments' sizes."""
        key = (stage, microbatch)
        entry = self._entries[key]
        if not entry.on_host:
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: reload of an activation "
                               "that is not offloaded")
        device = self.device or "cpu"
        targets, wanted = [], []
        for storage_key in entry.order:
            segment = entry.segments[storage_key]
            if segment.on_host:
                segment.on_host = False
                nbytes = segment.end - segment.aligned_start
                segment.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
                self._count(segment, ("reload", key, storage_key))
                targets.append(segment.buffer.data_ptr())
                wanted.append(nbytes)
        if sizes is not None and list(sizes) != wanted:
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: reload of segments of "
                               f"{list(sizes)} bytes, {wanted} were offloaded")
        entry.on_host = False
        return targets

    # What the weight backward still needs.
    def release_after_input_backward(self, stage, microbatch, param_groups):
        """After torch's input backward of (stage, mb) (`stage_backward_input`, which returned
        `param_groups`): drops every saved tensor that no node of the weight backward reads, so
        that only G stays until W. `param_groups` None (a first stage, whose input backward torch
        skips: its W runs the whole backward) keeps everything."""
        if param_groups is None:
            return
        entry = self._entries[(stage, microbatch)]
        needed = self.read_by(stage, microbatch, weight_backward_nodes(param_groups))
        for index in range(len(entry.stored)):
            if index not in needed:
                self._release(entry, index)

    def read_by(self, stage, microbatch, nodes):
        """The pack indices of (stage, mb)'s saved tensors that `nodes` (autograd nodes of its
        graph) read in their backward."""
        found = set()
        self._probe = ((stage, microbatch), found)
        try:
            for node in nodes:
                for name in _saved_attributes(node):
                    try:
                        getattr(node, name)
                    except Exception:  # noqa: BLE001 (freed, or nothing the hooks hold)
                        pass
        finally:
            self._probe = None
        return found

    def _release(self, entry, index):
        if index in entry.released:
            return
        entry.released.add(index)
        stored = entry.stored[index]
        if stored is None:
            if entry.recomputed is not None:
                entry.recomputed[index] = None
                if index in entry.recomputed_keys:
                    self._drop_need(entry, entry.recomputed_keys.pop(index))
            return
        if stored.weight:
            stored.tensor = None
            return
        stored.tensor = None
        self._drop_need(entry, stored.storage_key)

    def _drop_need(self, entry, storage_key):
        segment = entry.segments.get(storage_key)
        if segment is None:
            return
        segment.needed -= 1
        if segment.needed == 0:
            self._uncount(segment)
            segment.storage = segment.buffer = None

    # Recompute.
    def needs_recompute(self, stage, microbatch):
        entry = self._entries.get((stage, microbatch))
        return entry is not None and entry.recompute and entry.recomputed is None

    def recompute(self, stage, microbatch):
        """Runs (stage, mb)'s forward again from its checkpoint; its saved tensors become the
        ones the backward reads."""
        key = (stage, microbatch)
        entry = self._entries[key]
        if entry.checkpoint is None:
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: no checkpoint to "
                               "recompute from")
        # The inputs stay referenced by the pipeline stage until its backward, so the recompute
        # starts from them whether or not the schedule offloaded the saved copies.
        args, kwargs, (cpu_rng, cuda_rng) = entry.checkpoint
        captured = []

        def pack(tensor):
            captured.append(tensor.detach())
            return None

        devices = [self.device] if cuda_rng is not None else []
        with torch.random.fork_rng(devices=devices, enabled=True):
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)
            with torch.enable_grad(), \
                    torch.autograd.graph.saved_tensors_hooks(pack, lambda _: None):
                self._modules[stage](*args, **kwargs)
        if len(captured) != len(entry.stored):
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: the recomputed forward "
                               f"saved {len(captured)} tensors, the first run {len(entry.stored)}; "
                               "the stage's forward must run the same ops every time")
        entry.recomputed = captured
        for i, stored in enumerate(entry.stored):
            if stored is None:
                tensor = captured[i]
                if self.is_weight(tensor):
                    continue
                # A view of a storage the checkpoint holds (the stage input again) is those bytes;
                # anything else the recompute made is new.
                again = _Stored(tensor, False)
                key = again.storage_key if again.storage_key in entry.segments else \
                    ("recomputed", again.storage_key)
                entry.recomputed_keys[i] = key
                self._add(entry, again, key, tensor.untyped_storage())

    def forget(self, stage, microbatch):
        """Drops everything about (stage, mb): call after its last backward."""
        entry = self._entries.pop((stage, microbatch), None)
        if entry is None:
            return
        for segment in entry.segments.values():
            self._uncount(segment)

    def pending(self):
        """The (stage, mb) keys still held: none between steps."""
        return sorted(self._entries)


_SAVED_ATTRIBUTES = {}


def _saved_attributes(node):
    """The names of the attributes of an autograd node's type that can hold saved tensors: the
    `_saved_*` fields of torch's nodes, and `saved_tensors` of a custom autograd.Function's."""
    kind = type(node)
    names = _SAVED_ATTRIBUTES.get(kind)
    if names is None:
        names = _SAVED_ATTRIBUTES[kind] = [
            name for name in dir(node) if name == "saved_tensors" or (
                name.startswith("_saved_") and not name.endswith(
                    ("_sym_sizes", "_sym_strides", "_sym_size", "_sym_stride")))]
    return names


def weight_backward_nodes(param_groups):
    """The autograd nodes torch's weight backward (`stage_backward_weight`) runs for
    `param_groups`: every node on a path from a group's intermediates to its parameters'
    gradient accumulators."""
    nodes = set()
    for group in param_groups:
        params = set(group.get("params", ()))
        leads = _leading_to(group.get("intermediates", ()), params)
        for intermediate in group.get("intermediates", ()):
            stack = [intermediate]
            while stack:
                node = stack.pop()
                if node in nodes or node in params or not leads.get(node):
                    continue
                nodes.add(node)
                stack.extend(child for child, _ in node.next_functions if child is not None)
    return nodes


def _leading_to(roots, targets):
    """{node: whether a path of next_functions leads from it to one of `targets`} for the nodes
    reachable from `roots` (iteratively: a deep stage's graph is deeper than Python's stack)."""
    leads = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                leads[node] = node in targets or any(
                    leads.get(child, False) for child, _ in node.next_functions
                    if child is not None)
                continue
            if node in leads:
                continue
            leads[node] = False  # in progress: a cycle cannot occur in autograd's graph
            stack.append((node, True))
            stack.extend((child, False) for child, _ in node.next_functions
                         if child is not None and child not in leads)
    return leads
