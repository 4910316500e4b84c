"""PyTorch integration: offload what autograd saves during a stage's forward, driven by the schedule.

Wrap each forward of (stage, microbatch) in `offloader.forward(stage, mb)`: the tensors autograd
saves (activations; parameters stay on the device) are kept by the offloader, keyed by
(stage, microbatch) through `torch.autograd.graph.saved_tensors_hooks`. When the runner reaches an
OFFLOAD, `offload_source` packs them into one contiguous device buffer that the shim copies to its
pinned pool; `offload_complete` drops the device copy; at RELOAD `reload_target` allocates the
buffer the shim copies back into, and the backward's unpack hook views the tensors out of it.

Use an ActivationOffloader as (part of) the trainer object given to `optpipe_rt.Rank.run`:
its `offload_source`, `offload_complete` and `reload_target` are the runner's callbacks.
"""

import contextlib

import torch


class ActivationOffloader:
    def __init__(self, device=None):
        self.device = device
        self._saved = {}     # (stage, mb) -> list of tensors saved by autograd, on the device
        self._layout = {}    # (stage, mb) -> [(index, dtype, shape, byte offset, nbytes)]
        self._packed = {}    # (stage, mb) -> flat uint8 buffer (device) being offloaded / reloaded
        self._kept = {}      # (stage, mb) -> {index: tensor} not offloaded (parameters)

    @contextlib.contextmanager
    def forward(self, stage, microbatch):
        key = (stage, microbatch)
        store = self._saved.setdefault(key, [])

        def pack(tensor):
            store.append(tensor)
            return key, len(store) - 1

        def unpack(ref):
            return self._tensor(*ref)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    @staticmethod
    def _offloadable(tensor):
        # Parameters (leaf tensors that require grad) stay resident: they are not activations.
        return not (tensor.is_leaf and tensor.requires_grad)

    def offload_source(self, stage, microbatch):
        key = (stage, microbatch)
        store = self._saved.pop(key, [])
        parts, layout, kept, offset = [], [], {}, 0
        for index, tensor in enumerate(store):
            if not self._offloadable(tensor):
                kept[index] = tensor
                continue
            flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
            layout.append((index, tensor.dtype, tuple(tensor.shape), offset, flat.numel()))
            parts.append(flat)
            offset += flat.numel()
        device = self.device or (store[0].device if store else "cpu")
        packed = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8, device=device)
        self._packed[key], self._layout[key], self._kept[key] = packed, layout, kept
        return packed.data_ptr(), packed.numel()

    def _packed_size(self, stage, microbatch):
        layout = self._layout[(stage, microbatch)]
        return sum(entry[4] for entry in layout)

    def offload_complete(self, stage, microbatch):
        # The D2H copy has ended: the device buffer can go back to the caching allocator.
        self._packed.pop((stage, microbatch), None)

    def reload_target(self, stage, microbatch, nbytes):
        key = (stage, microbatch)
        layout = self._layout[key]
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
        self._packed[key] = buffer
        return buffer.data_ptr()

    def _tensor(self, key, index):
        if key in self._saved:  # never offloaded
            return self._saved[key][index]
        kept = self._kept.get(key, {})
        if index in kept:
            return kept[index]
        buffer = self._packed[key]
        for i, dtype, shape, offset, nbytes in self._layout[key]:
            if i == index:
                return buffer[offset:offset + nbytes].view(dtype).reshape(shape)
        raise KeyError(f"saved tensor {index} of stage {key[0]}, microbatch {key[1]}")

    def forget(self, stage, microbatch):
        """Drops everything about (stage, mb): call after its backward."""
        key = (stage, microbatch)
        for table in (self._saved, self._layout, self._packed, self._kept):
            table.pop(key, None)
