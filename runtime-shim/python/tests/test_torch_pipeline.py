"""optpipe_rt.torch.PipelineSchedule in real PyTorch: schedules compiled by optpipe-compile at
budgets that force offloads and recomputes, run on 4 gloo CPU processes (examples/mlp_pipeline.py),
against a single-process reference. Needs torch (tools/setup-python.sh) and the built tools."""

import json
import os
import sys
import tempfile
import types
import unittest
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import optpipe_rt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from built_tools import tool  # noqa: E402
from torch_guard import HAVE_TORCH  # noqa: E402

MIB = 1 << 20


def profile(placement, chunks, recompute):
    """An MLP stage's shape in the profile: F saves 3 equal tensors (A = 3 units), recompute keeps
    the input (C = 1 unit); a link that moves an activation in half a forward."""
    unit = MIB
    stage = {"forward": 40.0 / chunks, "backward_input": 40.0 / chunks,
             "backward_weight": 30.0 / chunks, "activation_bytes": 3 * unit,
             "weight_grad_bytes": 2 * unit}
    if recompute:
        stage.update(checkpoint_bytes=unit, recompute_forward=20.0 / chunks)
    link = 3 * unit / 0.021 / 1e9
    return {"format": "optpipe.profile/v1",
            "name": f"mlp-{placement}{chunks}{'-recompute' if recompute else ''}",
            "time_unit": "ms",
            "pipeline": {"ranks": 4, "chunks_per_rank": chunks, "placement": placement,
                         "microbatches": 8},
            "stage_defaults": stage, "p2p_latency": 0.01,
            "memory": {"budget_bytes": 64 * unit, "static_bytes": 0},
            "offload": {"d2h_gb_per_s": link, "h2d_gb_per_s": link, "channels": "duplex"}}


# (placement, chunks, recompute, method, budget in units or None): each forces what its name says.
CASES = [
    ("loop", 1, False, "1f1b", None),
    ("loop", 1, False, "pipeoffload", 8),
    ("loop", 1, False, "adaoffload", 6),
    ("loop", 1, False, "auto", 10),
    ("loop", 1, True, "adaoffload", 5),        # offloads and recomputes
    ("loop", 2, False, "interleaved-1f1b", None),
    ("loop", 2, False, "pipeoffload", 10),
    ("loop", 2, False, "adaoffload", 9),
    ("loop", 2, True, "adaoffload", 6),        # offloads and recomputes
    ("vshape", 2, False, "zb-v", None),
    ("vshape", 2, False, "adaoffload", 10),
    ("vshape", 2, True, "adaoffload", 5),      # recomputes only
    ("vshape", 2, True, "adaoffload", 8),
]


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class PipelineScheduleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import mlp_pipeline

        cls.scratch = tempfile.TemporaryDirectory(prefix="optpipe-torch-test-")
        cls.cases, jobs = [], []
        for placement, chunks, recompute, method, budget in CASES:
            spec = profile(placement, chunks, recompute)
            name = f"{spec['name']}-{method}-{budget}"
            profile_path = os.path.join(cls.scratch.name, spec["name"] + ".json")
            with open(profile_path, "w") as f:
                json.dump(spec, f)
            schedule_path = os.path.join(cls.scratch.name, name + ".opsched")
            command = [tool("optpipe-compile"), profile_path, "--method", method,
                       "--time-limit", "0", "--format", "bin", "-q", "-o", schedule_path]
            if budget is not None:
                command += ["--memory-budget", str(budget * MIB)]
            subprocess.run(command, check=True)
            cls.cases.append((name, profile_path, schedule_path, optpipe_rt.Schedule(schedule_path)))
            jobs += [{"schedule": schedule_path, "profile": profile_path, "offload": True},
                     {"schedule": schedule_path, "profile": profile_path, "offload": False}]
        # A JSON schedule too, converted with the budget it was compiled for.
        spec_path = cls.cases[2][1]
        cls.json_schedule = os.path.join(cls.scratch.name, "adaoffload.json")
        subprocess.run([tool("optpipe-compile"), spec_path, "--method", "adaoffload",
                        "--time-limit", "0", "-q", "--memory-budget", str(6 * MIB),
                        "-o", cls.json_schedule], check=True)
        os.environ["OPTPIPE_BIN"] = tool("optpipe")
        jobs.append({"schedule": cls.json_schedule, "profile": spec_path, "offload": True})
        results = mlp_pipeline.run_many(jobs)
        cls.with_offload, cls.without = results[0:-1:2], results[1:-1:2]
        cls.json_result = results[-1]

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def test_loss_and_gradients_equal_the_single_process_reference(self):
        for (name, *_), ranks, plain in zip(self.cases, self.with_offload, self.without):
            for r in ranks + plain:
                self.assertTrue(r["grads_equal"], (name, r["rank"]))
                self.assertTrue(r["losses_equal"], (name, r["rank"]))

    def test_the_cases_exercise_offload_and_recompute(self):
        totals = {"OFFLOAD": 0, "R": 0}
        for _, _, _, schedule in self.cases:
            for r in range(schedule.ranks):
                for op, *_ in schedule.actions(r):
                    if op in totals:
                        totals[op] += 1
        self.assertGreater(totals["OFFLOAD"], 100)
        self.assertGreater(totals["R"], 30)

    def test_each_rank_does_the_schedules_offloads_reloads_and_recomputes(self):
        for (name, _, _, schedule), ranks in zip(self.cases, self.with_offload):
            for r in ranks:
                actions = schedule.actions(r["rank"])
                count = {op: sum(a[0] == op for a in actions) for op in ("OFFLOAD", "RELOAD", "R")}
                stats = r["stats"]
                self.assertEqual(stats["offloads"], count["OFFLOAD"], (name, r["rank"]))
                self.assertEqual(stats["reloads"], count["RELOAD"], (name, r["rank"]))
                self.assertEqual(stats["recomputes"], count["R"], (name, r["rank"]))
                self.assertEqual(r["scheduled"]["offloads"], count["OFFLOAD"])

    def test_only_activations_are_offloaded(self):
        # Each stage's forward saves its input, the ReLU's and the Tanh's outputs: 3 microbatch
        # tensors, or the input alone when the microbatch is recomputed. A weight (64 x 64 floats,
        # 16 microbatch tensors' worth) in an offload would show in the bytes.
        for (name, _, _, schedule), ranks in zip(self.cases, self.with_offload):
            for r in ranks:
                actions = schedule.actions(r["rank"])
                recomputed = {(a[1], a[2]) for a in actions if a[0] == "R"}
                expected = sum(r["microbatch_bytes"] * (1 if (a[1], a[2]) in recomputed else 3)
                               for a in actions if a[0] == "OFFLOAD")
                self.assertEqual(r["stats"]["offloaded_bytes"], expected, (name, r["rank"]))
                self.assertEqual(r["stats"]["reloaded_bytes"], expected, (name, r["rank"]))

    def test_offload_and_recompute_lower_the_peak_of_resident_activations(self):
        for (name, *_), ranks, plain in zip(self.cases, self.with_offload, self.without):
            moved = any(r["stats"]["offloads"] or r["stats"]["recomputes"] for r in ranks)
            peak = max(r["stats"]["peak_resident_bytes"] for r in ranks)
            plain_peak = max(r["stats"]["peak_resident_bytes"] for r in plain)
            if moved:
                self.assertLess(peak, plain_peak, name)
            else:
                self.assertEqual(peak, plain_peak, name)
            for r, p in zip(ranks, plain):
                self.assertEqual(p["stats"]["offloads"] + p["stats"]["recomputes"], 0)

    def test_a_json_schedule_runs_when_given_its_profile(self):
        self.assertTrue(all(r["grads_equal"] and r["losses_equal"] for r in self.json_result))
        self.assertGreater(sum(r["stats"]["offloads"] for r in self.json_result), 0)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class OutOfOrderLastStageTest(unittest.TestCase):
    """The last stage runs its forwards out of microbatch order (F1 before F0, F3 before F2), as
    optpipe's optimised schedules may: torch's runtime kept the losses in a list in that order and
    read them back by microbatch index, so each backward started from another microbatch's loss
    and every rank's gradients were wrong (found by the conformance suite)."""

    def test_gradients_and_losses_equal_the_reference(self):
        import mlp_pipeline
        from test_optpipe_rt import BW, F, opsched
        ranks = [[(F, 0, 0, 0, 1, 0), (F, 0, 1, 1, 2, 0), (F, 0, 2, 2, 3, 0), (F, 0, 3, 3, 4, 0),
                  (BW, 0, 0, 6, 8, 0), (BW, 0, 1, 8, 10, 0), (BW, 0, 2, 12, 14, 0),
                  (BW, 0, 3, 14, 16, 0)],
                 [(F, 1, 1, 2, 3, 0), (F, 1, 0, 3, 4, 0), (BW, 1, 0, 4, 6, 0), (BW, 1, 1, 6, 8, 0),
                  (F, 1, 3, 8, 9, 0), (F, 1, 2, 9, 10, 0), (BW, 1, 2, 10, 12, 0),
                  (BW, 1, 3, 12, 14, 0)]]
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "out-of-order.opsched")
            with open(path, "wb") as f:
                f.write(opsched(ranks, [0, 1], 4))
            results = mlp_pipeline.run_many([{"schedule": path, "offload": True}])[0]
        for r in results:
            self.assertTrue(r["grads_equal"], r["rank"])
            self.assertTrue(r["losses_equal"], r["rank"])


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class MismatchTest(unittest.TestCase):
    """check_stages refuses, before any step, a schedule for another pipeline."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory(prefix="optpipe-torch-test-")
        cls.profile = os.path.join(cls.scratch.name, "p.json")
        with open(cls.profile, "w") as f:
            json.dump(profile("vshape", 2, False), f)
        path = os.path.join(cls.scratch.name, "s.opsched")
        subprocess.run([tool("optpipe-compile"), cls.profile, "--method", "zb-v", "--format",
                        "bin", "-q", "-o", path], check=True)
        cls.schedule = optpipe_rt.Schedule(path)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    @staticmethod
    def stages(rank, indices, world=4, num_stages=8):
        return [types.SimpleNamespace(group_size=world, group_rank=rank, num_stages=num_stages,
                                      stage_index=i) for i in indices]

    def check(self, stages, microbatches=8, profile=None):
        from optpipe_rt.torch import check_stages
        check_stages(self.schedule, stages, microbatches, profile)

    def test_the_profile_hash_is_the_compilers_for_every_number(self):
        # nlohmann's shortest form of 8.521814 is 8.521813999999999 where Python's is 8.521814:
        # the hash writes numbers with 17 digits on both sides, so they agree.
        from optpipe_rt.torch import profile_sha256
        spec = profile("loop", 1, False)
        spec["p2p_latency"] = 8.521814
        spec["stage_defaults"]["forward"] = 17.646312
        path = os.path.join(self.scratch.name, "digits.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        out = os.path.join(self.scratch.name, "digits.schedule.json")
        subprocess.run([tool("optpipe-compile"), path, "--method", "1f1b", "-q", "-o", out],
                       check=True)
        with open(out) as f:
            self.assertEqual(json.load(f)["profile"]["sha256"], profile_sha256(path))

    def test_accepts_the_pipeline_it_was_compiled_for(self):
        for rank in range(4):
            self.check(self.stages(rank, [rank, 7 - rank]), profile=self.profile)

    def test_refuses_another_pipeline(self):
        from optpipe_rt.torch import ScheduleMismatch
        other = os.path.join(self.scratch.name, "other.json")
        spec = profile("vshape", 2, False)
        spec["p2p_latency"] = 0.02
        with open(other, "w") as f:
            json.dump(spec, f)
        for stages, microbatches, profile_path, says in [
                (self.stages(0, [0, 7], world=2), 8, None, "for 4 ranks"),
                (self.stages(0, [0, 7], num_stages=4), 8, None, "has 8 stages"),
                (self.stages(0, [0, 4]), 8, None, "another placement"),
                (self.stages(0, [0, 7]), 4, None, "8 microbatches"),
                (self.stages(0, [0, 7]), 8, other, "another profile")]:
            with self.assertRaises(ScheduleMismatch) as caught:
                self.check(stages, microbatches, profile_path)
            self.assertIn(says, str(caught.exception))

    def test_a_json_schedule_needs_its_profile(self):
        from optpipe_rt.torch import ScheduleMismatch, load_schedule
        path = os.path.join(self.scratch.name, "s.json")
        subprocess.run([tool("optpipe-compile"), self.profile, "--method", "zb-v", "-q", "-o",
                        path], check=True)
        with self.assertRaises(ScheduleMismatch) as caught:
            load_schedule(path)
        self.assertIn("profile=", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
