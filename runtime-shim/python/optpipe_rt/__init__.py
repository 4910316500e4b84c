"""ctypes binding of the optpipe runtime shim (runtime-shim/include/optpipe_rt.h).

No build step: it loads the shared library `liboptpipe_rt.so` built by CMake. Set OPTPIPE_RT_LIBRARY
to its path, or leave it to the search below (build*/runtime-shim next to this checkout).

    import optpipe_rt
    schedule = optpipe_rt.Schedule("model.opsched")
    rank = optpipe_rt.Rank(schedule, rank=0)          # CUDA when present, else CPU
    rank.run(my_trainer)                              # object with forward/backward_input/... methods
"""

import ctypes
import glob
import os

__all__ = ["OptpipeError", "Schedule", "Rank", "Op", "load_library", "write_measured_profile"]


ABI_VERSION = 4  # OPTPIPE_RT_ABI_VERSION of the optpipe_rt.h these structures mirror


class Op:
    F, B, W, BW, OFFLOAD, RELOAD, R = range(7)
    NAMES = ("F", "B", "W", "BW", "OFFLOAD", "RELOAD", "R")


BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}
CHANNELS = {None: -1, "shared": 0, "duplex": 1}


class OptpipeError(RuntimeError):
    """A failed shim call: `status` is the optpipe_rt_status code, the message says why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _Info(ctypes.Structure):
    _fields_ = [("ranks", ctypes.c_int32), ("stages", ctypes.c_int32),
                ("microbatches", ctypes.c_int32), ("chunks_per_rank", ctypes.c_int32),
                ("time_unit", ctypes.c_int32), ("placement", ctypes.c_int32),
                ("channel_mode", ctypes.c_int32), ("has_offload_link", ctypes.c_int32),
                ("p2p_latency", ctypes.c_double), ("d2h_bytes_per_time", ctypes.c_double),
                ("h2d_bytes_per_time", ctypes.c_double), ("profile_sha256", ctypes.c_uint8 * 32),
                ("method", ctypes.c_char * 56)]


class _Stage(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("forward", ctypes.c_double),
                ("backward_input", ctypes.c_double), ("backward_weight", ctypes.c_double),
                ("activation_bytes", ctypes.c_int64), ("weight_grad_bytes", ctypes.c_int64),
                ("offloadable_bytes", ctypes.c_int64), ("recompute_forward", ctypes.c_double),
                ("checkpoint_bytes", ctypes.c_int64)]


class _RankInfo(ctypes.Structure):
    _fields_ = [("budget_bytes", ctypes.c_int64), ("static_bytes", ctypes.c_int64),
                ("link_group", ctypes.c_int32), ("action_count", ctypes.c_int32),
                ("host_pool_bytes", ctypes.c_int64)]


class _Action(ctypes.Structure):
    _fields_ = [("op", ctypes.c_int32), ("stage", ctypes.c_int32), ("microbatch", ctypes.c_int32),
                ("start", ctypes.c_double), ("end", ctypes.c_double), ("bytes", ctypes.c_int64)]


class _Config(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("backend", ctypes.c_int32),
                ("channel_mode", ctypes.c_int32),
                ("host_pool_bytes", ctypes.c_int64), ("host_pool_limit_bytes", ctypes.c_int64),
                ("cuda_device", ctypes.c_int32), ("cuda_compute_stream", ctypes.c_void_p),
                ("verify_checksums", ctypes.c_int32),
                ("cpu_emulated_bytes_per_second", ctypes.c_double)]


_STEP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
_SOURCE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))
_TARGET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                           ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))

_SEGMENTS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                             ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)),
                             ctypes.POINTER(ctypes.POINTER(ctypes.c_size_t)),
                             ctypes.POINTER(ctypes.c_size_t))
_RELOAD_SEGMENTS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                    ctypes.POINTER(ctypes.c_void_p))

_STEP_HOOKS = ("forward", "backward_input", "backward_weight", "backward", "recv_forward",
               "send_forward", "recv_backward", "send_backward")


class _Callbacks(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(name, _STEP) for name in _STEP_HOOKS] + [
        ("offload_source", _SOURCE), ("offload_complete", _STEP), ("reload_target", _TARGET),
        ("recompute", _STEP), ("offload_segments", _SEGMENTS),
        ("reload_segments", _RELOAD_SEGMENTS)]


_lib = None


def _candidates():
    env = os.environ.get("OPTPIPE_RT_LIBRARY")
    if env:
        yield env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    repo = os.path.dirname(root)
    for pattern in ("build*/runtime-shim/liboptpipe_rt.so", "build*/lib/liboptpipe_rt.so"):
        yield from sorted(glob.glob(os.path.join(repo, pattern)))
    yield "liboptpipe_rt.so"


def load_library():
    """Loads (once) and returns the shim's shared library."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise OSError("cannot load liboptpipe_rt.so; build it (cmake --build BUILD --target "
                      "optpipe_rt) and set OPTPIPE_RT_LIBRARY: " + "; ".join(errors))
    P = ctypes.POINTER
    vp, i = ctypes.c_void_p, ctypes.c_int
    sigs = {
        "optpipe_rt_strerror": (ctypes.c_char_p, [i]),
        "optpipe_rt_last_error": (ctypes.c_char_p, []),
        "optpipe_rt_abi_version": (i, []),
        "optpipe_rt_schedule_open": (i, [ctypes.c_char_p, P(vp)]),
        "optpipe_rt_schedule_open_memory": (i, [ctypes.c_char_p, ctypes.c_size_t, P(vp)]),
        "optpipe_rt_schedule_close": (None, [vp]),
        "optpipe_rt_schedule_get_info": (i, [vp, P(_Info)]),
        "optpipe_rt_schedule_get_stage": (i, [vp, i, P(_Stage)]),
        "optpipe_rt_schedule_get_rank": (i, [vp, i, P(_RankInfo)]),
        "optpipe_rt_schedule_get_action": (i, [vp, i, i, P(_Action)]),
        "optpipe_rt_config_init": (None, [P(_Config)]),
        "optpipe_rt_rank_open": (i, [vp, i, P(_Config), P(vp)]),
        "optpipe_rt_rank_close": (None, [vp]),
        "optpipe_rt_rank_backend": (i, [vp]),
        "optpipe_rt_offload": (i, [vp, i, i, vp, ctypes.c_size_t]),
        "optpipe_rt_reload": (i, [vp, i, i, vp]),
        "optpipe_rt_offload_segments": (i, [vp, i, i, P(vp), P(ctypes.c_size_t),
                                            ctypes.c_size_t]),
        "optpipe_rt_reload_segments": (i, [vp, i, i, P(vp), ctypes.c_size_t]),
        "optpipe_rt_schedule_issue_order": (i, [vp, i, P(ctypes.c_int32), i, P(i)]),
        "optpipe_rt_wait": (i, [vp, i, i]),
        "optpipe_rt_synchronize": (i, [vp, i, i]),
        "optpipe_rt_transfer_done": (i, [vp, i, i, P(i)]),
        "optpipe_rt_release": (i, [vp, i, i]),
        "optpipe_rt_host_pool_usage": (i, [vp, P(ctypes.c_int64), P(ctypes.c_int64)]),
        "optpipe_rt_recomputed": (i, [vp, i, i, P(i)]),
        "optpipe_rt_run": (i, [vp, P(_Callbacks), vp]),
        "optpipe_rt_measured": (i, [vp, i, i, P(ctypes.c_double), P(i)]),
        "optpipe_rt_last_makespan": (i, [vp, P(ctypes.c_double)]),
        "optpipe_rt_write_measured_profile": (i, [P(vp), ctypes.c_size_t, ctypes.c_char_p,
                                                  ctypes.c_char_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    if lib.optpipe_rt_abi_version() != ABI_VERSION:
        raise OSError(f"{path} has C ABI version {lib.optpipe_rt_abi_version()}, this binding "
                      f"mirrors version {ABI_VERSION}; rebuild the library or update the binding")
    _lib = lib
    return lib


def _check(status):
    if status != 0:
        lib = load_library()
        detail = lib.optpipe_rt_last_error().decode(errors="replace")
        name = lib.optpipe_rt_strerror(status).decode()
        raise OptpipeError(status, f"{name}: {detail}" if detail else name)


def strerror(status):
    return load_library().optpipe_rt_strerror(status).decode()


class Schedule:
    """An opened .opsched: from a path, or from bytes."""

    def __init__(self, source):
        lib = load_library()
        self._handle = ctypes.c_void_p()
        if isinstance(source, (bytes, bytearray)):
            data = bytes(source)
            _check(lib.optpipe_rt_schedule_open_memory(data, len(data), ctypes.byref(self._handle)))
        else:
            _check(lib.optpipe_rt_schedule_open(os.fsencode(source), ctypes.byref(self._handle)))
        info = _Info()
        _check(lib.optpipe_rt_schedule_get_info(self._handle, ctypes.byref(info)))
        self.ranks, self.stages = info.ranks, info.stages
        self.microbatches, self.chunks_per_rank = info.microbatches, info.chunks_per_rank
        self.time_unit = "us" if info.time_unit == 1 else "ms"
        self.channel_mode = "duplex" if info.channel_mode == 1 else "shared"
        self.method = info.method.decode()
        self.profile_sha256 = bytes(info.profile_sha256).hex()
        self.p2p_latency = info.p2p_latency
        self.has_offload_link = bool(info.has_offload_link)
        self.d2h_bytes_per_time, self.h2d_bytes_per_time = (info.d2h_bytes_per_time,
                                                            info.h2d_bytes_per_time)

    def stage(self, s):
        out = _Stage()
        _check(load_library().optpipe_rt_schedule_get_stage(self._handle, s, ctypes.byref(out)))
        return {name: getattr(out, name) for name, _ in _Stage._fields_}

    def rank(self, r):
        out = _RankInfo()
        _check(load_library().optpipe_rt_schedule_get_rank(self._handle, r, ctypes.byref(out)))
        return {name: getattr(out, name) for name, _ in _RankInfo._fields_}

    def actions(self, r):
        """The rank's actions in order: (op name, stage, microbatch, start, end, bytes)."""
        lib = load_library()
        out = _Action()
        result = []
        for index in range(self.rank(r)["action_count"]):
            _check(lib.optpipe_rt_schedule_get_action(self._handle, r, index, ctypes.byref(out)))
            result.append((Op.NAMES[out.op], out.stage, out.microbatch, out.start, out.end, out.bytes))
        return result

    def issue_order(self, r):
        """Indices into `actions(r)` in the order the runner issues them (each transfer right after
        the last compute op that ends by its predicted start): the order the host pool is sized
        in, which a loop that issues transfers itself must follow."""
        count = self.rank(r)["action_count"]
        indices = (ctypes.c_int32 * max(count, 1))()
        n = ctypes.c_int()
        _check(load_library().optpipe_rt_schedule_issue_order(self._handle, r, indices, count,
                                                              ctypes.byref(n)))
        return list(indices[:n.value])

    def close(self):
        if self._handle:
            load_library().optpipe_rt_schedule_close(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        self.close()


class Rank:
    """One rank's runtime: offload engine, runner and timing recorder."""

    def __init__(self, schedule, rank, backend="auto", channel_mode=None, host_pool_bytes=0,
                 host_pool_limit_bytes=0, cuda_device=0, cuda_stream=None, verify_checksums=False,
                 cpu_emulated_bytes_per_second=0.0):
        lib = load_library()
        config = _Config()
        lib.optpipe_rt_config_init(ctypes.byref(config))
        config.backend = BACKENDS[backend]
        config.channel_mode = CHANNELS[channel_mode]
        config.host_pool_bytes = host_pool_bytes
        config.host_pool_limit_bytes = host_pool_limit_bytes
        config.cuda_device = cuda_device
        config.cuda_compute_stream = cuda_stream
        config.verify_checksums = 1 if verify_checksums else 0
        config.cpu_emulated_bytes_per_second = cpu_emulated_bytes_per_second
        self._handle = ctypes.c_void_p()
        self.schedule = schedule
        self.rank = rank
        _check(lib.optpipe_rt_rank_open(schedule._handle, rank, ctypes.byref(config),
                                        ctypes.byref(self._handle)))
        self.backend = {1: "cpu", 2: "cuda"}[lib.optpipe_rt_rank_backend(self._handle)]

    # Offload engine: pointers are ints (tensor.data_ptr(), ctypes.addressof(buffer)).
    def offload(self, stage, microbatch, device_ptr, nbytes):
        _check(load_library().optpipe_rt_offload(self._handle, stage, microbatch, device_ptr, nbytes))

    def reload(self, stage, microbatch, device_ptr):
        _check(load_library().optpipe_rt_reload(self._handle, stage, microbatch, device_ptr))

    def offload_segments(self, stage, microbatch, segments):
        """Offloads an activation held in several device buffers, [(ptr, nbytes), ...], straight
        into one host slot (no packed device copy). The buffers must live until it has ended."""
        n = len(segments)
        ptrs = (ctypes.c_void_p * max(n, 1))(*[p for p, _ in segments])
        sizes = (ctypes.c_size_t * max(n, 1))(*[b for _, b in segments])
        _check(load_library().optpipe_rt_offload_segments(self._handle, stage, microbatch, ptrs,
                                                          sizes, n))

    def reload_segments(self, stage, microbatch, targets):
        """Reloads each offloaded segment into its own device buffer (pointers, in the offload's
        order, each of its segment's size)."""
        n = len(targets)
        ptrs = (ctypes.c_void_p * max(n, 1))(*targets)
        _check(load_library().optpipe_rt_reload_segments(self._handle, stage, microbatch, ptrs, n))

    def wait(self, stage, microbatch):
        _check(load_library().optpipe_rt_wait(self._handle, stage, microbatch))

    def synchronize(self, stage, microbatch):
        _check(load_library().optpipe_rt_synchronize(self._handle, stage, microbatch))

    def done(self, stage, microbatch):
        flag = ctypes.c_int()
        _check(load_library().optpipe_rt_transfer_done(self._handle, stage, microbatch,
                                                       ctypes.byref(flag)))
        return bool(flag.value)

    def release(self, stage, microbatch):
        _check(load_library().optpipe_rt_release(self._handle, stage, microbatch))

    def host_pool_usage(self):
        used, capacity = ctypes.c_int64(), ctypes.c_int64()
        _check(load_library().optpipe_rt_host_pool_usage(self._handle, ctypes.byref(used),
                                                         ctypes.byref(capacity)))
        return used.value, capacity.value

    def recomputed(self, stage, microbatch):
        """True when the schedule recomputes (stage, mb): its forward keeps only the checkpoint."""
        flag = ctypes.c_int()
        _check(load_library().optpipe_rt_recomputed(self._handle, stage, microbatch,
                                                    ctypes.byref(flag)))
        return bool(flag.value)

    def run(self, trainer):
        """One iteration. `trainer` has methods named like the C callbacks (forward(stage, mb),
        backward_input, ..., offload_source(stage, mb) -> (ptr, nbytes) or offload_segments(stage,
        mb) -> [(ptr, nbytes), ...], offload_complete, reload_target(stage, mb, nbytes) -> ptr or
        reload_segments(stage, mb, sizes) -> [ptr, ...], recompute(stage, mb)); missing ones are
        skipped.
        A Python exception in a callback stops the run and is re-raised here."""
        failure, keep = [], []
        callbacks = _Callbacks()
        callbacks.struct_size = ctypes.sizeof(_Callbacks)

        def hook(name, kind, body):
            """Sets the callback `name` (a ctypes `kind`) to run body(trainer.<name>, *args) when
            the trainer has that method; an exception stops the run and is re-raised after it."""
            method = getattr(trainer, name, None)
            if method is None:
                return

            def call(_user, *args):
                try:
                    body(method, *args)
                    return 0
                except BaseException as e:  # noqa: BLE001 - re-raised after the run
                    failure.append(e)
                    return 1
            keep.append(kind(call))
            setattr(callbacks, name, keep[-1])

        for name in _STEP_HOOKS + ("offload_complete", "recompute"):
            hook(name, _STEP, lambda method, stage, microbatch: method(stage, microbatch))

        def source(method, stage, microbatch, ptr, nbytes):
            ptr[0], nbytes[0] = method(stage, microbatch)

        def target(method, stage, microbatch, nbytes, ptr):
            ptr[0] = method(stage, microbatch, nbytes)

        arrays = []  # the last offload's segment arrays, valid until the next callback

        def segments(method, stage, microbatch, ptrs, sizes, count):
            listed = method(stage, microbatch)
            n = len(listed)
            arrays[:] = [(ctypes.c_void_p * max(n, 1))(*[p for p, _ in listed]),
                         (ctypes.c_size_t * max(n, 1))(*[b for _, b in listed])]
            ptrs[0] = ctypes.cast(arrays[0], ctypes.POINTER(ctypes.c_void_p))
            sizes[0] = ctypes.cast(arrays[1], ctypes.POINTER(ctypes.c_size_t))
            count[0] = n

        def reload_segments(method, stage, microbatch, count, sizes, ptrs):
            targets = method(stage, microbatch, [sizes[i] for i in range(count)])
            for i in range(count):
                ptrs[i] = targets[i]

        hook("offload_source", _SOURCE, source)
        hook("reload_target", _TARGET, target)
        hook("offload_segments", _SEGMENTS, segments)
        hook("reload_segments", _RELOAD_SEGMENTS, reload_segments)
        status = load_library().optpipe_rt_run(self._handle, ctypes.byref(callbacks), None)
        if failure:
            raise failure[0]
        _check(status)

    def measured(self, op, stage):
        """(median duration in the schedule's time unit, samples) of op F/B/W/BW/R at a stage."""
        median, samples = ctypes.c_double(), ctypes.c_int()
        code = Op.NAMES.index(op) if isinstance(op, str) else op
        _check(load_library().optpipe_rt_measured(self._handle, code, stage, ctypes.byref(median),
                                                  ctypes.byref(samples)))
        return median.value, samples.value

    def last_makespan(self):
        out = ctypes.c_double()
        _check(load_library().optpipe_rt_last_makespan(self._handle, ctypes.byref(out)))
        return out.value

    def close(self):
        if self._handle:
            load_library().optpipe_rt_rank_close(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        self.close()


def write_measured_profile(ranks, path, name=""):
    """Writes a measured optpipe.profile/v1 from these Rank objects' timings."""
    handles = (ctypes.c_void_p * len(ranks))(*[r._handle.value for r in ranks])
    _check(load_library().optpipe_rt_write_measured_profile(handles, len(ranks), name.encode(),
                                                            os.fsencode(path)))
