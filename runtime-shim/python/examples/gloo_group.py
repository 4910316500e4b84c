"""One gloo process group on this machine's CPU, a forked process per rank, for the examples and
the tests that run a pipeline in real processes (mlp_pipeline.py, tests/conformance.py)."""

import json
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, out_dir, work, args):
    torch.set_num_threads(1 if world > 1 else torch.get_num_threads())
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, use_libuv=True)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    try:
        result = work(rank, *args)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def run_on_ranks(world, work, *args):
    """Runs `work(rank, *args)` in `world` forked processes of one gloo group (one intra-op thread
    each when there are several, so that they do not contend); returns what each returned (JSON
    round-tripped), in rank order."""
    with tempfile.TemporaryDirectory(prefix="optpipe-gloo-") as out_dir:
        mp.start_processes(_rank_main, nprocs=world, start_method="fork",
                           args=(world, _free_port(), out_dir, work, args))
        results = []
        for rank in range(world):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                results.append(json.load(f))
    return results


def init_single_process():
    """A gloo group of this process alone (a pipeline whose stages are all on rank 0)."""
    if not dist.is_initialized():
        store = dist.TCPStore("127.0.0.1", _free_port(), 1, True, use_libuv=True)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
