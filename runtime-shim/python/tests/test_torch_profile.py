"""optpipe_rt.torch.profile_stages and `python -m optpipe_rt.profile`: profiles measured from
PyTorch stages on the CPU read back through optpipe-compile and optpipe validate; activation bytes
equal the tensors autograd saves; split backward times add up to a fused backward; bad stages are
refused with a ValueError that names the problem. Needs torch (tools/setup-python.sh)."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..")
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, HERE)
from built_tools import tool  # noqa: E402
from torch_guard import HAVE_TORCH  # noqa: E402

if HAVE_TORCH:
    import torch


def build_mlp():
    """4 stages of Linear-ReLU-Linear, one microbatch of 32 x 64 (also the entry point's builder)."""
    torch.manual_seed(0)
    stages = [torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                  torch.nn.Linear(128, 64)) for _ in range(4)]
    return stages, torch.randn(32, 64)


def fused_backward_ms(module, x, iterations=7, warmup=2):
    """The median of a plain backward (no hooks) of `module` on `x` (floating: requiring grad)."""
    times = []
    for _ in range(iterations + warmup):
        inp = x.detach().clone()
        if inp.is_floating_point():
            inp.requires_grad_(True)
        out = module(inp)
        grad = torch.randn_like(out)
        start = time.perf_counter()
        torch.autograd.backward([out], [grad])
        times.append((time.perf_counter() - start) * 1e3)
        module.zero_grad(set_to_none=True)
    return statistics.median(times[warmup:])


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class ProfileStagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)      # CPU timings: no contention between intra-op threads
        from optpipe_rt.torch import profile_stages
        cls.profile_stages = staticmethod(profile_stages)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def compile_and_validate(self, profile_path):
        schedule = self.path("schedule.json")
        run = subprocess.run([tool("optpipe-compile"), profile_path, "--method", "1f1b", "-q",
                              "-o", schedule], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        run = subprocess.run([tool("optpipe"), "validate", profile_path, schedule],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_mlp_profile_compiles_and_validates(self):
        stages, x = build_mlp()
        out = self.path("mlp.json")
        profile = self.profile_stages(stages, x, microbatches=8, budget_bytes="1GiB",
                                      warmup=1, iterations=3, name="mlp", output=out,
                                      offload_gb_per_s=10)
        with open(out, encoding="utf-8") as f:
            self.assertEqual(json.load(f), profile)
        self.assertEqual(profile["pipeline"], {"ranks": 4, "chunks_per_rank": 1,
                                               "placement": "loop", "microbatches": 8})
        for entry in profile["stages"]:
            # Saved: the stage input, the hidden ReLU output (saved by ReLU and the 2nd Linear).
            self.assertEqual(entry["activation_bytes"], 32 * 64 * 4 + 32 * 128 * 4)
            self.assertEqual(entry["weight_grad_bytes"], entry["activation_bytes"])
            self.assertEqual(entry["checkpoint_bytes"], 32 * 64 * 4)
        params = 2 * 64 * 128 + 128 + 64
        for rank in profile["memory"]["per_rank"]:
            self.assertEqual(rank["static_bytes"], 16 * params)   # fp32 Adam: 4 x param bytes
        self.compile_and_validate(out)

    def test_entry_point(self):
        out = self.path("cli.json")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYTHON_DIR, HERE]),
                   OMP_NUM_THREADS="1")
        run = subprocess.run([sys.executable, "-m", "optpipe_rt.profile",
                              "test_torch_profile:build_mlp", "--microbatches", "16",
                              "--budget", "40GiB", "--warmup", "1", "--iterations", "2",
                              "-o", out], capture_output=True, text=True, env=env, cwd=HERE)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(out, encoding="utf-8") as f:
            profile = json.load(f)
        self.assertEqual(profile["memory"]["budget_bytes"], "40GiB")
        self.assertEqual(profile["pipeline"]["microbatches"], 16)
        self.assertEqual(profile["p2p_latency"], 0.05)
        self.compile_and_validate(out)
        run = subprocess.run([sys.executable, "-m", "optpipe_rt.profile",
                              "test_torch_profile:build_mlp", "--microbatches", "4", "-o", out],
                             capture_output=True, text=True, env=env, cwd=HERE)
        self.assertEqual(run.returncode, 2)
        self.assertIn("budget_bytes: required", run.stderr)

    def test_activation_bytes_are_the_saved_tensors(self):
        batch, n_in, n_out = 16, 48, 24
        torch.manual_seed(1)
        stage = torch.nn.Sequential(torch.nn.Linear(n_in, n_out, bias=False), torch.nn.ReLU())
        x = torch.randn(batch, n_in)
        # The stage under test is the second: its input arrives from a stage and needs a gradient.
        entry = self.profile_stages([torch.nn.Linear(x.shape[1], x.shape[1]), stage], x,
                                    microbatches=2,
                                    budget_bytes=1 << 30, warmup=0,
                                    iterations=1)["stages"][1]
        # By hand: Linear saves its input (batch x in), ReLU its output (batch x out), fp32.
        self.assertEqual(entry["activation_bytes"], 4 * batch * (n_in + n_out))
        # W needs the Linear's input again; the ReLU mask serves B only.
        self.assertEqual(entry["weight_grad_bytes"], 4 * batch * n_in)
        self.assertEqual(entry["checkpoint_bytes"], 4 * batch * n_in)
        # Independently: what the hooks see on a fresh run, weights left out, each storage once.
        weights = {p.untyped_storage().data_ptr() for p in stage.parameters()}
        storages = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in weights:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            stage(x.clone().requires_grad_(True))
        self.assertEqual(entry["activation_bytes"], sum(storages.values()))

    def test_split_backward_times_add_up_to_fused(self):
        torch.manual_seed(2)
        stage = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 512))
        x = torch.randn(128, 512)
        entry = self.profile_stages([torch.nn.Linear(x.shape[1], x.shape[1]), stage], x,
                                    microbatches=2,
                                    budget_bytes=1 << 30, warmup=2, iterations=7)["stages"][1]
        for key in ("forward", "backward_input", "backward_weight"):
            self.assertGreater(entry[key], 0, key)
        fused = fused_backward_ms(stage, x)
        ratio = (entry["backward_input"] + entry["backward_weight"]) / fused
        self.assertTrue(0.25 < ratio < 4, f"B + W = {ratio:.2f} x fused backward ({fused:.3f} ms)")

    def test_a_token_id_stage_has_no_input_backward_and_its_whole_backward_as_w(self):
        """Stage 0 fed token ids: torch's runtime skips its B (no input gradient) and runs the
        whole backward as W; the profile says so, and its W is the backward measured apart."""
        torch.manual_seed(4)
        vocab, width, tokens = 512, 256, 256
        first = torch.nn.Sequential(torch.nn.Embedding(vocab, width), torch.nn.Linear(width, width),
                                    torch.nn.GELU(), torch.nn.Linear(width, width))
        second = torch.nn.Linear(width, width)
        ids = torch.randint(0, vocab, (2, tokens // 2))
        # The two measurements alternate in short rounds, so that other tests' load (ctest runs
        # them side by side on two cores) falls on both alike; the medians are compared.
        profiled, apart = [], []
        for _ in range(9):
            profile = self.profile_stages([first, second], ids, microbatches=4,
                                          budget_bytes=1 << 30, warmup=1, iterations=3)
            entry = profile["stages"][0]
            self.assertEqual(entry["backward_input"], 0)
            self.assertEqual(entry["weight_grad_bytes"], entry["activation_bytes"])
            self.assertGreater(profile["stages"][1]["backward_input"], 0)
            profiled.append(entry["backward_weight"])
            apart.append(fused_backward_ms(first, ids, iterations=3, warmup=1))
        ratio = statistics.median(profiled) / statistics.median(apart)
        self.assertTrue(0.8 <= ratio <= 1.2, f"W {profiled} ms, the backward {apart} ms")

    def test_arguments_the_compiler_would_refuse_are_refused(self):
        stages = [torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)]
        x = torch.randn(4, 8)
        for kwargs, says in [
                ({"budget_bytes": "lots"}, r"budget_bytes: not a size: 'lots'"),
                ({"budget_bytes": -1}, r"budget_bytes: must be 1 byte to 1024TiB"),
                ({"budget_bytes": 1e30}, r"budget_bytes: must be an integer number of bytes"),
                ({"budget_bytes": "2048TiB"}, r"budget_bytes: must be 1 byte to 1024TiB"),
                ({"p2p_latency": float("nan")}, r"p2p_latency: must be a number"),
                ({"offload_gb_per_s": float("inf")}, r"offload_gb_per_s: must be a number"),
                ({"microbatches": 10**6}, r"microbatches: must be an integer from 1 to 65536"),
                ({"placement": [0, 0]}, r"placement: must be .* each 1 times"),
                ({"name": "a\x1b[31mb"}, r"name: must be text without control characters"),
                ({"name": "evil\u202e"}, r"name: must be text without control characters")]:
            args = {"microbatches": 2, "budget_bytes": 1 << 30}
            args.update(kwargs)
            with self.assertRaisesRegex(ValueError, says, msg=kwargs):
                self.profile_stages(stages, x, **args)

    def test_the_entry_point_refuses_a_bad_builder_and_its_own_source(self):
        scratch = self.path("mods")
        os.makedirs(scratch, exist_ok=True)
        source = os.path.join(scratch, "tinymod.py")
        text = ("import torch\n"
                "def build():\n"
                "    return [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)], torch.randn(2, 4)\n"
                "def broken():\n"
                "    raise RuntimeError('no GPU here')\n")
        with open(source, "w") as f:
            f.write(text)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYTHON_DIR, scratch]))
        for builder, output, says in [
                ("tinymod:build", source, "is the builder's own source"),
                ("nomodule:build", self.path("x.json"), "cannot import nomodule"),
                ("tinymod:broken", self.path("x.json"), "broken() failed: RuntimeError"),
                ("tinymod:missing", self.path("x.json"), "has no function missing")]:
            run = subprocess.run([sys.executable, "-m", "optpipe_rt.profile", builder,
                                  "--microbatches", "2", "--budget", "1GiB", "-o", output],
                                 capture_output=True, text=True, env=env, cwd=scratch)
            self.assertEqual(run.returncode, 2, run.stderr)
            self.assertEqual(len(run.stderr.strip().splitlines()), 1, run.stderr)
            self.assertIn(says, run.stderr)
        with open(source) as f:
            self.assertEqual(f.read(), text)

    def test_bad_input_is_refused(self):
        with self.assertRaisesRegex(ValueError, r"stages: empty"):
            self.profile_stages([], torch.randn(2, 2), microbatches=1, budget_bytes=1 << 30)
        stages = [torch.nn.Linear(8, 16), torch.nn.Linear(32, 4)]
        with self.assertRaisesRegex(ValueError,
                                    r"stages\[1\]: does not accept stage 0's output \(\(4, 16\)"):
            self.profile_stages(stages, torch.randn(4, 8), microbatches=1, budget_bytes=1 << 30)
        with self.assertRaisesRegex(ValueError, r"stages\[0\]: does not accept example_input"):
            self.profile_stages(stages, torch.randn(4, 5), microbatches=1, budget_bytes=1 << 30)
        with self.assertRaisesRegex(ValueError, r"budget_bytes: required"):
            self.profile_stages(stages[:1], torch.randn(4, 8), microbatches=1)
        with self.assertRaisesRegex(ValueError, r"chunks_per_rank: must be 1 to 64 and divide"):
            self.profile_stages(stages, torch.randn(4, 8), microbatches=1, budget_bytes=1 << 30,
                                chunks_per_rank=3)


if __name__ == "__main__":
    unittest.main()
