"""Tests of the ctypes binding on the CPU backend (run by ctest; no GPU, no torch needed).

The .opsched files here are written from docs/opsched.md with struct, independently of the C++
writer, so they also check that the spec is enough to produce a file the shim accepts."""

import ctypes
import os
import struct
import sys
import tempfile
import unittest
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import optpipe_rt  # noqa: E402

F, B, W, BW, OFFLOAD, RELOAD, R = range(7)
NBYTES = 1024


def opsched(ranks_actions, stage_rank, microbatches, method=b"py", activation=NBYTES, version=2,
            checkpoint=-1):
    """A .opsched: R ranks, v = S / R, uniform stages (checkpoint bytes -1: no recompute), duplex
    link. Version 1 has no recompute fields."""
    R, S = len(ranks_actions), len(stage_rank)
    header_size, stage_size, rank_size, action_size = 192, 72 if version >= 2 else 56, 40, 40
    stage_table = header_size
    rank_table = stage_table + S * stage_size
    first_action = rank_table + R * rank_size
    total_actions = sum(len(a) for a in ranks_actions)
    file_size = first_action + total_actions * action_size + 4
    body = bytearray()
    for s in range(S):
        body += struct.pack("<II3d3q", stage_rank[s], 0, 1.0, 1.0, 1.0, activation, 0, activation)
        if version >= 2:
            body += struct.pack("<dq", 0.5, checkpoint)
    offset = first_action
    for actions in ranks_actions:
        body += struct.pack("<qqIIQQ", 1 << 30, 0, 0, len(actions), offset, 0)
        offset += len(actions) * action_size
    for actions in ranks_actions:
        for op, stage, mb, start, end, nbytes in actions:
            body += struct.pack("<B3xIII2dq", op, stage, mb, 0, start, end, nbytes)
    header = bytearray(header_size)
    header[0:8] = b"OPSCHED\0"
    struct.pack_into("<IIIIQ", header, 8, 0x01020304, version, 0, 1, file_size)
    struct.pack_into("<IIIIBBBBIII", header, 32, R, S, microbatches, S // R, 0, 2, 1, 0,
                     stage_size, rank_size, action_size)
    struct.pack_into("<3dQQ", header, 64, 0.0, 2048.0, 2048.0, stage_table, rank_table)
    header[104:136] = bytes(range(32))
    header[136:136 + len(method)] = method
    struct.pack_into("<I", header, 16, zlib.crc32(bytes(header)))
    data = bytes(header) + bytes(body)
    return data + struct.pack("<I", zlib.crc32(data))


# One rank, two stages on it (v = 2), two microbatches; stage 0's microbatch 0 is offloaded.
ONE_RANK = [[(F, 0, 0, 0, 1, 0), (F, 1, 0, 1, 2, 0), (OFFLOAD, 0, 0, 1, 1.5, NBYTES),
             (F, 0, 1, 2, 3, 0), (F, 1, 1, 3, 4, 0), (RELOAD, 0, 0, 4, 4.5, NBYTES),
             (BW, 1, 0, 4, 6, 0), (BW, 0, 0, 6, 8, 0), (BW, 1, 1, 8, 10, 0), (BW, 0, 1, 10, 12, 0)]]


# ONE_RANK with OFFLOAD(0, 0) predicted to start a hair before F(0, 0) ends (a writer's rounding).
ONE_RANK_ROUNDED = [[ONE_RANK[0][0], (OFFLOAD, 0, 0, 1 - 1e-12, 1.5, NBYTES)] +
                    [a for a in ONE_RANK[0][1:] if a[0] != OFFLOAD]]


# Stage 0's microbatch 0 is recomputed: its F keeps a checkpoint, R rebuilds it before BW.
RECOMPUTE = [[(F, 0, 0, 0, 1, 0), (F, 1, 0, 1, 2, 0), (F, 0, 1, 2, 3, 0), (F, 1, 1, 3, 4, 0),
              (BW, 1, 0, 4, 6, 0), (R, 0, 0, 6, 6.5, 0), (BW, 0, 0, 6.5, 8.5, 0),
              (BW, 1, 1, 8.5, 10.5, 0), (BW, 0, 1, 10.5, 12.5, 0)]]


class Trainer:
    """Activations are ctypes buffers; backward checks that the reloaded bytes are the forward's."""

    def __init__(self):
        self.log, self.device, self.expected = [], {}, {}

    def forward(self, s, j):
        buf = (ctypes.c_uint8 * NBYTES)(*[(i * 7 + s * 3 + j) % 251 for i in range(NBYTES)])
        self.device[(s, j)] = buf
        self.expected[(s, j)] = bytes(buf)
        self.log.append(("F", s, j))

    def backward(self, s, j):
        if bytes(self.device.pop((s, j))) != self.expected[(s, j)]:
            raise AssertionError(f"activation ({s}, {j}) differs after reload")
        self.log.append(("BW", s, j))

    def offload_source(self, s, j):
        self.log.append(("OFFLOAD", s, j))
        return ctypes.addressof(self.device[(s, j)]), NBYTES

    def offload_complete(self, s, j):
        del self.device[(s, j)]  # "free" the device copy

    def reload_target(self, s, j, nbytes):
        self.log.append(("RELOAD", s, j))
        buf = (ctypes.c_uint8 * nbytes)()
        self.device[(s, j)] = buf
        return ctypes.addressof(buf)


class SegmentTrainer(Trainer):
    """Trainer through the segment callbacks (one segment per activation), as SavedActivations
    offers them to OffloadDriver and to the runner."""

    def offload_segments(self, s, j):
        return [self.offload_source(s, j)]

    def reload_segments(self, s, j, sizes=None):
        return [self.reload_target(s, j, NBYTES if sizes is None else sizes[0])]


class ScheduleTest(unittest.TestCase):
    def test_reads_a_file_written_from_the_spec(self):
        data = opsched(ONE_RANK, [0, 0], 2)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.opsched")
            with open(path, "wb") as f:
                f.write(data)
            schedule = optpipe_rt.Schedule(path)
        self.assertEqual((schedule.ranks, schedule.stages, schedule.microbatches), (1, 2, 2))
        self.assertEqual(schedule.method, "py")
        self.assertEqual(schedule.profile_sha256, bytes(range(32)).hex())
        self.assertEqual(schedule.channel_mode, "duplex")
        self.assertEqual(schedule.stage(1)["activation_bytes"], NBYTES)
        self.assertEqual(schedule.rank(0)["host_pool_bytes"], NBYTES)
        self.assertEqual(schedule.actions(0)[2], ("OFFLOAD", 0, 0, 1.0, 1.5, NBYTES))

    def test_reads_version_1_files_as_without_recompute(self):
        schedule = optpipe_rt.Schedule(opsched(ONE_RANK, [0, 0], 2, version=1))
        self.assertEqual(schedule.stage(0)["checkpoint_bytes"], -1)
        self.assertEqual(schedule.stage(0)["recompute_forward"], schedule.stage(0)["forward"])
        self.assertEqual(schedule.actions(0)[2], ("OFFLOAD", 0, 0, 1.0, 1.5, NBYTES))
        with self.assertRaises(optpipe_rt.OptpipeError) as caught:
            optpipe_rt.Schedule(opsched(RECOMPUTE, [0, 0], 2, version=1, checkpoint=16))
        self.assertEqual(caught.exception.status, 8)  # op R does not exist in version 1

    def test_refuses_damage_with_codes(self):
        data = opsched(ONE_RANK, [0, 0], 2)
        cases = {
            "truncated": (data[:-1], 3),
            "flipped": (data[:300] + bytes([data[300] ^ 1]) + data[301:], 7),
            "magic": (b"X" + data[1:], 4),
            "version": (data[:12] + struct.pack("<I", 9) + data[16:], 6),
            "endian": (data[:8] + bytes(reversed(data[8:12])) + data[12:], 5),
        }
        for name, (bad, status) in cases.items():
            with self.subTest(name):
                with self.assertRaises(optpipe_rt.OptpipeError) as caught:
                    optpipe_rt.Schedule(bad)
                self.assertEqual(caught.exception.status, status)
                self.assertIn(optpipe_rt.strerror(status), str(caught.exception))
        with self.assertRaises(optpipe_rt.OptpipeError) as caught:
            optpipe_rt.Schedule("/nonexistent/x.opsched")
        self.assertEqual(caught.exception.status, 2)


class RankTest(unittest.TestCase):
    def setUp(self):
        self.schedule = optpipe_rt.Schedule(opsched(ONE_RANK, [0, 0], 2))

    def test_recomputes_where_the_schedule_says(self):
        schedule = optpipe_rt.Schedule(opsched(RECOMPUTE, [0, 0], 2, checkpoint=16))
        self.assertEqual(schedule.stage(0)["checkpoint_bytes"], 16)
        self.assertEqual(schedule.actions(0)[5], ("R", 0, 0, 6.0, 6.5, 0))
        rank = optpipe_rt.Rank(schedule, 0, backend="cpu")
        self.assertTrue(rank.recomputed(0, 0))
        self.assertFalse(rank.recomputed(0, 1))

        class Recomputing(Trainer):
            def forward(self, s, j):
                super().forward(s, j)
                if rank.recomputed(s, j):
                    self.device[(s, j)] = None  # keep the checkpoint only

            def recompute(self, s, j):
                super().forward(s, j)
                self.log[-1] = ("R", s, j)

        trainer = Recomputing()
        rank.run(trainer)
        self.assertEqual(trainer.log, [
            ("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("BW", 1, 0), ("R", 0, 0),
            ("BW", 0, 0), ("BW", 1, 1), ("BW", 0, 1)])
        self.assertEqual(rank.measured("R", 0)[1], 1)
        rank.close()

    def test_runs_the_schedule_with_python_callbacks(self):
        for channels in ("shared", "duplex"):
            rank = optpipe_rt.Rank(self.schedule, 0, backend="cpu", channel_mode=channels,
                                   verify_checksums=True)
            self.assertEqual(rank.backend, "cpu")
            trainer = Trainer()
            rank.run(trainer)
            # OFFLOAD(0, 0) starts with F(1, 0): the runner issues the copy first.
            self.assertEqual(trainer.log, [
                ("F", 0, 0), ("OFFLOAD", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1),
                ("RELOAD", 0, 0), ("BW", 1, 0), ("BW", 0, 0), ("BW", 1, 1), ("BW", 0, 1)])
            self.assertEqual(rank.host_pool_usage(), (0, NBYTES))
            median, samples = rank.measured("BW", 0)
            self.assertEqual(samples, 2)
            self.assertGreaterEqual(median, 0)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "measured.json")
                optpipe_rt.write_measured_profile([rank], path, name="py-measured")
                with open(path) as f:
                    import json
                    profile = json.load(f)
            self.assertEqual(profile["format"], "optpipe.profile/v1")
            self.assertEqual(profile["pipeline"]["placement"], [0, 0])
            rank.close()

    def test_an_offload_follows_the_forward_it_copies_whatever_the_rounding(self):
        # The runner still runs F(0, 0) first; before it, the copy would read an activation not
        # yet computed (Trainer.offload_source would fail).
        rank = optpipe_rt.Rank(optpipe_rt.Schedule(opsched(ONE_RANK_ROUNDED, [0, 0], 2)), 0,
                               backend="cpu")
        trainer = Trainer()
        rank.run(trainer)
        self.assertEqual(trainer.log[:3], [("F", 0, 0), ("OFFLOAD", 0, 0), ("F", 1, 0)])
        rank.close()

    def test_callback_exceptions_propagate(self):
        rank = optpipe_rt.Rank(self.schedule, 0, backend="cpu")

        class Failing(Trainer):
            def forward(self, s, j):
                raise ValueError("boom")

        with self.assertRaisesRegex(ValueError, "boom"):
            rank.run(Failing())

    def test_engine_directly_and_pool_limit(self):
        rank = optpipe_rt.Rank(self.schedule, 0, backend="cpu")
        src = (ctypes.c_uint8 * NBYTES)(*range(256), *range(256), *range(256), *range(256))
        dst = (ctypes.c_uint8 * NBYTES)()
        rank.offload(0, 1, ctypes.addressof(src), NBYTES)
        rank.synchronize(0, 1)
        rank.reload(0, 1, ctypes.addressof(dst))
        rank.wait(0, 1)
        self.assertTrue(rank.done(0, 1))
        rank.release(0, 1)
        self.assertEqual(bytes(dst), bytes(src))
        with self.assertRaises(optpipe_rt.OptpipeError) as caught:
            rank.release(0, 1)
        self.assertEqual(caught.exception.status, 13)
        with self.assertRaises(optpipe_rt.OptpipeError) as caught:
            optpipe_rt.Rank(self.schedule, 0, backend="cpu", host_pool_limit_bytes=10)
        self.assertEqual(caught.exception.status, 9)
        self.assertIn(str(NBYTES), str(caught.exception))


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_guard import HAVE_TORCH  # noqa: E402

if HAVE_TORCH:
    import torch


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class TorchOffloadTest(unittest.TestCase):
    def test_saved_tensors_round_trip_through_the_shim(self):
        import torch
        from optpipe_rt.saved_activations import SavedActivations

        torch.manual_seed(0)
        layer = torch.nn.Linear(NBYTES // 16, NBYTES // 16)
        x = torch.randn(2, NBYTES // 16)

        def reference():
            layer.zero_grad()
            layer(x).tanh().sum().backward()
            return layer.weight.grad.clone()

        expected = reference()
        layer.zero_grad()
        offloader = SavedActivations({0: layer}, device="cpu")
        rank = optpipe_rt.Rank(self.schedule_for_torch(), 0, backend="cpu")
        with offloader.forward(0, 0):
            loss = layer(x).tanh().sum()
        segments = offloader.offload_segments(0, 0)
        # The activations only: the input and tanh's output, 512 bytes each, straight from their
        # storages (no packed copy: nothing more is resident); not the weight.
        self.assertEqual([n for _, n in segments], [x.numel() * x.element_size()] * 2)
        self.assertEqual(offloader.resident_bytes, 2 * x.numel() * x.element_size())
        rank.offload_segments(0, 0, segments)
        rank.synchronize(0, 0)
        offloader.offload_complete(0, 0)
        self.assertEqual(offloader.resident_bytes, 0)
        rank.reload_segments(0, 0, offloader.reload_segments(0, 0))
        rank.wait(0, 0)
        loss.backward()
        rank.release(0, 0)
        offloader.forget(0, 0)
        self.assertTrue(torch.equal(layer.weight.grad, expected))
        self.assertEqual(offloader.resident_bytes, 0)

    @staticmethod
    def schedule_for_torch():
        # The reader refuses transfers of other byte counts than the stage's offloadable bytes.
        actions = [a[:5] + ((1 << 20) if a[5] else 0,) for a in ONE_RANK[0]]
        return optpipe_rt.Schedule(opsched([actions], [0, 0], 2, activation=1 << 20))



def drive_like_a_csv_loop(rank, trainer, offloader, dialect="2.6"):
    """What a loop executing the exported CSV does with `OffloadDriver`: the schedule's compute
    ops in order, the driver's hooks around each. A 2.5 CSV has no fused token: BW runs as B, W."""
    from optpipe_rt.torch_pipelining import OffloadDriver, offload_plan

    driver = OffloadDriver(rank, offloader, offload_plan(rank.schedule, rank.rank))
    for op, stage, mb, *_ in rank.schedule.actions(rank.rank):
        if op == "F":
            driver.before("F", stage, mb)
            trainer.forward(stage, mb)
            driver.after("F", stage, mb)
        elif op == "BW":
            parts = ["BW"] if dialect == "2.6" else ["B", "W"]
            driver.before(parts[0], stage, mb)
            driver.before_backward(stage, mb)
            trainer.backward(stage, mb)
            driver.after_backward(stage, mb)
            driver.after(parts[0], stage, mb)
            if len(parts) == 2:  # W: the weight gradient, already in the fused backward here
                driver.before("W", stage, mb)
                driver.after("W", stage, mb)


# OFFLOAD(0, 1) is predicted to start the instant BW(0, 0) starts, when (0, 0) still holds its
# host slot until BW(0, 0) ends: the runner issues it before BW(0, 0), so two slots are live at
# once. A replay in file order (compute first at equal times) frees (0, 0)'s slot first, sized the
# pool for one and the runner ran out (issue 63).
OFFLOAD_AT_A_BACKWARD = [[
    (F, 0, 0, 0, 1, 0), (OFFLOAD, 0, 0, 1, 1.5, NBYTES), (F, 1, 0, 1, 2, 0),
    (RELOAD, 0, 0, 2, 2.5, NBYTES), (BW, 1, 0, 2, 3, 0), (F, 0, 1, 3, 4, 0), (BW, 0, 0, 4, 6, 0),
    (OFFLOAD, 0, 1, 4, 4.5, NBYTES), (F, 1, 1, 6, 7, 0), (RELOAD, 0, 1, 7, 7.5, NBYTES),
    (BW, 1, 1, 7, 8, 0), (BW, 0, 1, 8, 10, 0)]]


class IssueOrderTest(unittest.TestCase):
    def test_the_pool_is_sized_in_the_order_the_runner_issues(self):
        schedule = optpipe_rt.Schedule(opsched(OFFLOAD_AT_A_BACKWARD, [0, 0], 2))
        actions = schedule.actions(0)
        order = [actions[i][:3] for i in schedule.issue_order(0)]
        self.assertLess(order.index(("OFFLOAD", 0, 1)), order.index(("BW", 0, 0)))
        self.assertEqual(schedule.rank(0)["host_pool_bytes"], 2 * NBYTES)
        for trainer in (Trainer(), SegmentTrainer()):  # one buffer, and the segment callbacks
            rank = optpipe_rt.Rank(schedule, 0, backend="cpu", verify_checksums=True)
            rank.run(trainer)
            self.assertEqual(rank.host_pool_usage(), (0, 2 * NBYTES))
            rank.close()
            self.assertEqual([e[0] for e in trainer.log].count("OFFLOAD"), 2)

    def test_the_python_plan_issues_in_the_same_order(self):
        from optpipe_rt.torch_pipelining import offload_plan
        schedule = optpipe_rt.Schedule(opsched(OFFLOAD_AT_A_BACKWARD, [0, 0], 2))
        plan = offload_plan(schedule, 0)
        self.assertEqual(plan[("F", 0, 1)], [("OFFLOAD", 0, 1)])   # before BW(0, 0), not after
        self.assertEqual(plan[("BW", 0, 0)], [])

    def test_a_smaller_offload_takes_the_planned_slot(self):
        # Slots of the planned size keep the replay's guarantee whatever the real sizes.
        schedule = optpipe_rt.Schedule(opsched(OFFLOAD_AT_A_BACKWARD, [0, 0], 2))
        rank = optpipe_rt.Rank(schedule, 0, backend="cpu")
        small = (ctypes.c_uint8 * 16)()
        rank.offload_segments(0, 0, [(ctypes.addressof(small), 16)])
        self.assertEqual(rank.host_pool_usage()[0], NBYTES)
        rank.synchronize(0, 0)
        rank.close()

    def test_segments_land_in_one_slot_and_come_back_apart(self):
        schedule = optpipe_rt.Schedule(opsched(OFFLOAD_AT_A_BACKWARD, [0, 0], 2))
        rank = optpipe_rt.Rank(schedule, 0, backend="cpu", verify_checksums=True)
        parts = [(ctypes.c_uint8 * n)(*[(i * 5 + n) % 251 for i in range(n)]) for n in (7, 300, 1)]
        rank.offload_segments(0, 0, [(ctypes.addressof(p), len(p)) for p in parts])
        back = [(ctypes.c_uint8 * len(p))() for p in parts]
        rank.reload_segments(0, 0, [ctypes.addressof(b) for b in back])
        rank.wait(0, 0)
        self.assertEqual([bytes(b) for b in back], [bytes(p) for p in parts])
        with self.assertRaises(optpipe_rt.OptpipeError):
            rank.reload_segments(0, 0, [ctypes.addressof(back[0])])   # twice
        rank.release(0, 0)
        rank.close()


class OffloadDriverTest(unittest.TestCase):
    def test_frees_a_device_copy_by_the_first_forward_after_its_predicted_end(self):
        class Logged(SegmentTrainer):
            def offload_complete(self, s, j):
                super().offload_complete(s, j)
                self.log.append(("FREED", s, j))

        # ONE_RANK with stage 0's microbatch 1 offloaded too, reloaded after BW(0, 0), which a
        # 2.5 CSV runs as B then W.
        actions = [(F, 0, 0, 0, 1, 0), (F, 1, 0, 1, 2, 0), (OFFLOAD, 0, 0, 1, 1.5, NBYTES),
                   (F, 0, 1, 2, 3, 0), (F, 1, 1, 3, 4, 0), (OFFLOAD, 0, 1, 3, 3.5, NBYTES),
                   (RELOAD, 0, 0, 4, 4.5, NBYTES), (BW, 1, 0, 4, 6, 0), (BW, 0, 0, 6, 8, 0),
                   (RELOAD, 0, 1, 8, 8.5, NBYTES), (BW, 1, 1, 8, 10, 0), (BW, 0, 1, 10, 12, 0)]
        schedule = optpipe_rt.Schedule(opsched([actions], [0, 0], 2))
        for dialect in ("2.6", "2.5"):
            # 50 ms per copy: OFFLOAD(0, 0) (predicted 1 to 1.5) is still running when F(1, 0)
            # starts at 1, and the fence before F(0, 1) at 2 waits for it.
            rank = optpipe_rt.Rank(schedule, 0, backend="cpu",
                                   cpu_emulated_bytes_per_second=NBYTES / 0.05)
            trainer = Logged()
            drive_like_a_csv_loop(rank, trainer, trainer, dialect)  # B checks the reloaded bytes
            log = trainer.log
            self.assertLess(log.index(("F", 1, 0)), log.index(("FREED", 0, 0)), dialect)
            self.assertLess(log.index(("FREED", 0, 0)), log.index(("F", 0, 1)), dialect)
            self.assertLess(log.index(("F", 1, 1)), log.index(("RELOAD", 0, 0)), dialect)
            self.assertLess(log.index(("RELOAD", 0, 0)), log.index(("BW", 1, 0)), dialect)
            self.assertLess(log.index(("BW", 0, 0)), log.index(("RELOAD", 0, 1)), dialect)
            self.assertLess(log.index(("RELOAD", 0, 1)), log.index(("BW", 1, 1)), dialect)
            self.assertEqual([e for e in log if e[0] == "BW"],
                             [("BW", 1, 0), ("BW", 0, 0), ("BW", 1, 1), ("BW", 0, 1)])
            self.assertEqual(rank.host_pool_usage()[0], 0)
            rank.close()


def one_rank_offloading(microbatches):
    """One rank, two stages on it; every stage-0 activation is offloaded after its forward and
    reloaded before the backwards, which run last-microbatch-first (so reloads really wait)."""
    actions, t = [], 0.0
    for j in range(microbatches):
        actions += [(F, 0, j, t, t + 1, 0), (F, 1, j, t + 1, t + 2, 0),
                    (OFFLOAD, 0, j, t + 1, t + 1.5, NBYTES)]
        t += 2
    for j in reversed(range(microbatches)):
        actions += [(RELOAD, 0, j, t, t + 0.5, NBYTES), (BW, 1, j, t, t + 2, 0),
                    (BW, 0, j, t + 2, t + 4, 0)]
        t += 4
    return [actions]


class TorchStages:
    """Two MLP stages trained on `microbatches` batches in the runner's order. Stage 1's input is a
    detached copy of stage 0's output (as a pipeline boundary would receive it); its gradient goes
    back to stage 0's backward. With offload, a SavedActivations store holds what the forwards save
    and stage 0's activations go to the shim."""

    def __init__(self, device, offload=False, microbatches=4, width=1024, batch=256):
        import torch
        from optpipe_rt.saved_activations import SavedActivations

        torch.manual_seed(0)
        self.stages = [torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                           torch.nn.Linear(4 * width, width)).to(device)
                       for _ in range(2)]
        self.batches = [torch.randn(batch, width, device=device) for _ in range(microbatches)]
        offloader = self.offloader = \
            SavedActivations(dict(enumerate(self.stages)), device) if offload else None
        if offloader is not None:
            self.offload_segments = offloader.offload_segments
            self.offload_complete = offloader.offload_complete
            self.reload_segments = offloader.reload_segments
        self.heads, self.boundary, self.losses = {}, {}, {}

    def forward(self, s, j):
        x = self.batches[j] if s == 0 else self.boundary[j]
        if self.offloader is None:
            y = self.stages[s](x)
        else:
            with self.offloader.forward(s, j):
                y = self.stages[s](x)
        if s == 0:
            self.boundary[j] = y.detach().requires_grad_()
            self.heads[(s, j)] = y
        else:
            loss = y.square().mean()
            self.losses[j] = loss.detach()
            self.heads[(s, j)] = loss

    def backward(self, s, j):
        head = self.heads.pop((s, j))
        if s == 1:
            head.backward()
        else:
            head.backward(self.boundary.pop(j).grad)
        if self.offloader is not None:
            self.offloader.forget(s, j)

    def gradients(self):
        return [p.grad for stage in self.stages for p in stage.parameters()]


@unittest.skipUnless(HAVE_TORCH and torch.cuda.is_available(), "torch with a CUDA device needed")
class TorchCudaOffloadTest(unittest.TestCase):
    """tools/gpu-check.sh: the offload hooks on a GPU through the shim's CUDA backend."""

    def test_offloaded_training_step_matches_the_resident_one_with_less_memory(self):
        microbatches = 4
        stream = torch.cuda.current_stream().cuda_stream

        def step(offload, run):
            model = TorchStages("cuda", offload, microbatches)
            actions = one_rank_offloading(microbatches)
            if not offload:  # the same order without its transfers
                actions = [[a for a in actions[0] if a[0] not in (OFFLOAD, RELOAD)]]
            rank = optpipe_rt.Rank(optpipe_rt.Schedule(opsched(actions, [0, 0], microbatches)),
                                   0, backend="cuda", cuda_stream=stream,
                                   host_pool_bytes=256 << 20, verify_checksums=True)
            self.assertEqual(rank.backend, "cuda")
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            run(rank, model, model.offloader)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            rank.close()
            return model, peak

        def by_the_runner(rank, model, _offloader):
            rank.run(model)

        def by_the_csv_driver(rank, model, offloader):
            drive_like_a_csv_loop(rank, model, offloader)

        resident, resident_peak = step(False, by_the_runner)
        peaks = {}
        for name, run in (("runner", by_the_runner), ("CSV driver", by_the_csv_driver)):
            offloaded, peaks[name] = step(True, run)
            for j in range(microbatches):
                self.assertTrue(torch.equal(offloaded.losses[j], resident.losses[j]), (name, j))
            for got, want in zip(offloaded.gradients(), resident.gradients()):
                self.assertTrue(torch.equal(got, want), name)
            self.assertLess(peaks[name], resident_peak, name)
        print(f"\n  peak activation memory: resident {resident_peak / 2**20:.1f} MiB, stage 0 "
              f"offloaded by the runner {peaks['runner'] / 2**20:.1f} MiB, by the CSV driver "
              f"{peaks['CSV driver'] / 2**20:.1f} MiB", file=sys.stderr)


class PipeliningCsvTest(unittest.TestCase):
    def test_plan_lines_the_csv_up_with_the_schedules_offloads(self):
        from optpipe_rt.torch_pipelining import load_csv, offload_plan

        schedule = optpipe_rt.Schedule(opsched(ONE_RANK, [0, 0], 2))
        csv = "0F0,1F0,,0F1,1F1,1B0,0B0,1B1,0B1\n"
        rows = load_csv(csv)
        self.assertEqual(rows[0][:3], [("F", 0, 0), ("F", 1, 0), ("F", 0, 1)])
        plan = offload_plan(schedule, 0, rows[0])
        # The offload starts as F(1, 0) does, so it is issued before it, after F(0, 0).
        self.assertEqual(plan[("F", 0, 0)], [("OFFLOAD", 0, 0)])
        self.assertEqual(plan[("F", 1, 0)], [])
        self.assertEqual(plan[("F", 1, 1)], [("RELOAD", 0, 0)])
        self.assertEqual(plan[None], [])
        # Started a hair before its F ends (rounding), it still goes after that F.
        rounded = offload_plan(optpipe_rt.Schedule(opsched(ONE_RANK_ROUNDED, [0, 0], 2)), 0)
        self.assertEqual(rounded[("F", 0, 0)], [("OFFLOAD", 0, 0)])
        with self.assertRaises(ValueError):
            offload_plan(schedule, 0, load_csv("0F0,0F1,1F0,1F1,1B0,0B0,1B1,0B1")[0])
        # 2.5 has no full-backward token: B then W stand for the fused BW.
        rows25 = load_csv("0F0,1F0,0F1,1F1,1B0,1W0,0B0,0W0,1B1,1W1,0B1,0W1", dialect="2.5")
        offload_plan(schedule, 0, rows25[0])
        with self.assertRaises(ValueError):
            load_csv("0X1")


if __name__ == "__main__":
    unittest.main()
