"""What autograd saves during a stage's forward, held per (stage, microbatch) so that a schedule can
offload it, reload it or recompute it.

`SavedActivations.forward(stage, mb)` is a context around one forward: inside it,
`torch.autograd.graph.saved_tensors_hooks` hand every tensor autograd saves to this store instead
of the autograd graph, and the backward's unpack hook takes them back from here. The store then
does what the schedule says:

- OFFLOAD (`offload_source`): the activations' storages, each once, are packed into one
  contiguous device buffer for the shim to copy to its pinned pool; the saved tensors are
  dropped, and `offload_complete` drops the packed copy once the copy has ended. Parameters, views
  of parameters and module buffers are never packed: they are weights, not activations, and stay
  where they are. The saved stage input is an activation like any other.
- RELOAD (`reload_target`): a device buffer of the packed size to copy back into; the unpack hook
  views each saved tensor out of it with its original dtype, shape, strides and offset.
- Recompute: a forward marked `recompute=True` keeps only its checkpoint (the stage inputs and the
  weights); `recompute(stage, mb)` runs the stage's module again on the checkpoint, with the RNG
  state of the first run, and takes the tensors it saves, in the order they were saved, as the
  originals.

`resident_bytes` counts the device bytes of saved activations the store holds (each storage once),
and `peak_resident_bytes` its high-water mark, which is what the schedule's memory model predicts.
"""

import contextlib

import torch

_ALIGN = 64  # each storage starts on a 64-byte boundary of the packed buffer: any dtype can view it


class _Stored:
    """One saved tensor: the tensor itself while resident, or where to find it in a buffer."""

    __slots__ = ("tensor", "storage_key", "dtype", "shape", "stride", "storage_offset", "weight",
                 "span")

    def __init__(self, tensor, weight):
        self.tensor = tensor
        self.weight = weight
        self.storage_key = tensor.untyped_storage().data_ptr()
        self.dtype, self.shape = tensor.dtype, tuple(tensor.shape)
        self.stride, self.storage_offset = tuple(tensor.stride()), tensor.storage_offset()
        self.span = _span(tensor)

    @property
    def bytes_key(self):
        return (self.storage_key,) + self.span


def _span(tensor):
    """The bytes of its storage a tensor views: [start, end). A microbatch of a batch is a view of
    the whole batch's storage; only its own rows are its activation."""
    size = tensor.element_size()
    start = tensor.storage_offset() * size
    if tensor.numel() == 0:
        return start, start
    last = sum((n - 1) * abs(step) for n, step in zip(tensor.shape, tensor.stride()))
    return start, start + (last + 1) * size


class _Entry:
    """Everything saved by one (stage, microbatch) forward."""

    def __init__(self, recompute):
        self.recompute = recompute
        self.stored = []         # _Stored per pack, in pack order (None: dropped for recompute)
        self.buffer = None       # packed device buffer (offloading, or reloaded)
        self.layout = {}         # storage key -> (byte offset in the buffer, nbytes)
        self.packed_bytes = 0
        self.offloaded = False
        self.checkpoint = None   # (args, kwargs, rng states) of a recomputed forward
        self.recomputed = None   # tensors the recompute saved, in pack order


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
        self._storages = {}   # storage key -> [nbytes, references from resident entries]
        self.resident_bytes = 0
        self.peak_resident_bytes = 0
        self._capturing_args = None
        for stage, module in self._modules.items():
            module.register_forward_pre_hook(self._pre_hook(stage), with_kwargs=True)

    # Accounting of resident device bytes, each storage once.
    def _hold(self, key, nbytes):
        held = self._storages.setdefault(key, [nbytes, 0])
        held[1] += 1
        if held[1] == 1:
            self.resident_bytes += nbytes
            self.peak_resident_bytes = max(self.peak_resident_bytes, self.resident_bytes)

    def _drop(self, key):
        held = self._storages[key]
        held[1] -= 1
        if held[1] == 0:
            self.resident_bytes -= held[0]
            del self._storages[key]

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
                self._hold(stored.bytes_key, stored.span[1] - stored.span[0])
            return key, index

        def unpack(ref):
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
        stored = entry.stored[index]
        if stored is None:
            if entry.recomputed is None:
                raise RuntimeError(f"stage {key[0]}, microbatch {key[1]}: the backward needs the "
                                   "recomputed forward, which has not run")
            return entry.recomputed[index]
        if stored.tensor is None and (entry.buffer is None or entry.offloaded):
            raise RuntimeError(f"stage {key[0]}, microbatch {key[1]}: the backward needs an "
                               "offloaded activation that was not reloaded")
        return self._view(entry, stored)

    # OFFLOAD / RELOAD, as the shim's callbacks (offload_source, offload_complete, reload_target).
    def offload_source(self, stage, microbatch):
        """Packs (stage, mb)'s activations into one device buffer: (pointer, bytes)."""
        key = (stage, microbatch)
        entry = self._entries[key]
        segments = {}  # storage key -> [storage, first byte, end byte] that its tensors view
        for stored in entry.stored:
            if stored is not None and stored.tensor is not None and not stored.weight:
                segment = segments.setdefault(stored.storage_key,
                                              [stored.tensor.untyped_storage(), *stored.span])
                segment[1] = min(segment[1], stored.span[0])
                segment[2] = max(segment[2], stored.span[1])
        offset = 0
        for storage_key, (_, start, end) in segments.items():
            start -= start % _ALIGN  # keeps every view's offset a multiple of its element size
            entry.layout[storage_key] = (offset, start, end - start)
            offset += -(-(end - start) // _ALIGN) * _ALIGN
        device = self.device or (next(iter(segments.values()))[0].device if segments else "cpu")
        buffer = torch.empty(offset, dtype=torch.uint8, device=device)
        self._hold(("buffer", key), offset)
        for storage_key, (storage, _, _) in segments.items():
            at, start, nbytes = entry.layout[storage_key]
            source = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
            buffer[at:at + nbytes].copy_(source[start:start + nbytes])
            for stored in entry.stored:
                if stored is not None and stored.storage_key == storage_key and \
                        stored.tensor is not None and not stored.weight:
                    stored.tensor = None
                    self._drop(stored.bytes_key)
        entry.buffer, entry.packed_bytes, entry.offloaded = buffer, offset, True
        return buffer.data_ptr(), offset

    def packed_bytes(self, stage, microbatch):
        return self._entries[(stage, microbatch)].packed_bytes

    def offload_complete(self, stage, microbatch):
        """The D2H copy has ended: the packed device copy goes."""
        key = (stage, microbatch)
        entry = self._entries[key]
        if entry.buffer is not None:
            entry.buffer = None
            self._drop(("buffer", key))

    def reload_target(self, stage, microbatch, nbytes):
        """A device buffer of `nbytes` for the H2D copy: (pointer)."""
        key = (stage, microbatch)
        entry = self._entries[key]
        if nbytes != entry.packed_bytes:
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: reload of {nbytes} bytes, "
                               f"{entry.packed_bytes} were offloaded")
        device = self.device or "cpu"
        entry.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
        entry.offloaded = False
        self._hold(("buffer", key), nbytes)
        return entry.buffer.data_ptr()

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
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda _: None):
                self._modules[stage](*args, **kwargs)
        if len(captured) != len(entry.stored):
            raise RuntimeError(f"stage {stage}, microbatch {microbatch}: the recomputed forward "
                               f"saved {len(captured)} tensors, the first run {len(entry.stored)}; "
                               "the stage's forward must run the same ops every time")
        entry.recomputed = captured
        for i, stored in enumerate(entry.stored):
            if stored is None:
                start, end = _span(captured[i])
                self._hold(self._recomputed_key(captured[i]), end - start)

    def _view(self, entry, stored):
        if stored.tensor is not None:
            return stored.tensor
        at, start, _ = entry.layout[stored.storage_key]
        first = at + stored.span[0] - start
        view = torch.empty(0, dtype=stored.dtype, device=entry.buffer.device)
        return view.set_(entry.buffer.untyped_storage(), first // stored.dtype.itemsize,
                         stored.shape, stored.stride)

    @staticmethod
    def _recomputed_key(tensor):
        # A tensor saved twice (one op's output, the next op's input) is held once.
        return ("recomputed", tensor.untyped_storage().data_ptr()) + _span(tensor)

    def forget(self, stage, microbatch):
        """Drops everything about (stage, mb): call after its last backward."""
        key = (stage, microbatch)
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        for i, stored in enumerate(entry.stored):
            if stored is None:
                if entry.recomputed is not None:
                    self._drop(self._recomputed_key(entry.recomputed[i]))
            elif stored.tensor is not None and not stored.weight:
                self._drop(stored.bytes_key)
        if entry.buffer is not None:
            self._drop(("buffer", key))

    def pending(self):
        """The (stage, mb) keys still held: none between steps."""
        return sorted(self._entries)
