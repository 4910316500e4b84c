"""The conformance suite: the schedule's promise, measured in real PyTorch with real Hugging Face
model code (tiny Llama, GPT-2, Qwen2, Mistral with random weights) and an MLP. Each model goes
through profile_stages -> optpipe-compile (its budget; a budget that forces offloads; the same
without a host link, which forces recomputes) -> PipelineSchedule on 4 gloo CPU processes
(conformance.py). Per case and rank: loss and gradients equal a single-process reference, the
offload/reload/recompute counts equal the schedule's, the measured peak of resident saved
activations is within 5% of the schedule's predicted activation peak, and the host pool never
runs out at its planned size. A profile written from the training steps recompiles."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from torch_guard import HAVE_TORCH  # noqa: E402

MARGIN = 1.05


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class ConformanceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import conformance
        import conformance_models

        cls.conformance = conformance
        cls.scratch = tempfile.TemporaryDirectory(prefix="optpipe-conformance-test-")
        cls.prepared = conformance.prepare(conformance_models.MODELS, cls.scratch.name)
        cls.written = os.path.join(cls.scratch.name, "llama-from-training.json")
        jobs = [{"model": name, "schedule": path, "profile": profile_path}
                for name, _, profile_path, _, path, _ in cls.prepared]
        for job, (name, case, *_) in zip(jobs, cls.prepared):
            if (name, case) == ("llama", "offload"):
                job["write_profile"] = cls.written
        cls.results = conformance.run_jobs(jobs)
        print("\n" + conformance.table(cls.prepared, cls.results), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def cases(self):
        for (name, case, _, spec, _, schedule), ranks in zip(self.prepared, self.results):
            yield f"{name}/{case}", spec, schedule, ranks

    def test_loss_and_gradients_equal_the_single_process_reference(self):
        for where, _, _, ranks in self.cases():
            for r in ranks:
                self.assertTrue(r["grads_equal"], (where, r["rank"], r["grad_error"]))
                self.assertTrue(r["losses_equal"], (where, r["rank"]))

    def test_each_rank_does_what_the_schedule_says(self):
        for where, _, schedule, ranks in self.cases():
            for r, planned in zip(ranks, schedule["ranks"]):
                ops = [a["op"] for a in planned["actions"]]
                self.assertEqual(r["stats"]["offloads"], ops.count("OFFLOAD"), where)
                self.assertEqual(r["stats"]["reloads"], ops.count("RELOAD"), where)
                self.assertEqual(r["stats"]["recomputes"], ops.count("R"), where)

    def test_the_cases_force_offloads_and_recomputes(self):
        for where, _, _, ranks in self.cases():
            offloads = sum(r["stats"]["offloads"] for r in ranks)
            recomputes = sum(r["stats"]["recomputes"] for r in ranks)
            if where.endswith("/plain"):
                self.assertEqual(offloads + recomputes, 0, where)
            elif where.endswith("/offload"):
                self.assertGreater(offloads, 0, where)
            else:
                self.assertGreater(recomputes, 0, where)

    def test_measured_activation_peak_is_the_predicted_one_on_every_rank(self):
        for where, spec, schedule, ranks in self.cases():
            predicted = self.conformance.predicted_activation_peaks(schedule, spec)
            for r, peak in zip(ranks, predicted):
                measured = r["stats"]["peak_resident_bytes"]
                self.assertLessEqual(measured, peak * MARGIN,
                                     f"{where} rank {r['rank']}: measured {measured} bytes, "
                                     f"predicted {peak}")

    def test_the_host_pool_never_runs_out_at_its_planned_size(self):
        for where, _, _, ranks in self.cases():
            for r in ranks:
                stats = r["stats"]
                if stats["offloads"]:
                    self.assertEqual(stats["host_pool_bytes"], r["planned_pool_bytes"], where)
                self.assertLessEqual(stats["host_pool_peak_bytes"], r["planned_pool_bytes"],
                                     where)

    def test_a_profile_written_from_training_recompiles(self):
        import conformance_models

        with open(self.written, encoding="utf-8") as f:
            written = json.load(f)
        llama = next(spec for name, case, _, spec, _, _ in self.prepared
                     if (name, case) == ("llama", "offload"))
        self.assertEqual(written["pipeline"]["microbatches"], conformance_models.MICROBATCHES)
        for measured, profiled in zip(written["stages"], llama["stages"]):
            # Bytes: what training saved equals what profile_stages measured.
            for key in ("activation_bytes", "weight_grad_bytes"):
                self.assertEqual(measured[key], profiled[key], (measured["index"], key))
            self.assertGreater(measured["forward"], 0)
            self.assertGreater(measured["backward_weight"], 0)
        # torch skips stage 0's I (no input gradient): its W is the whole backward.
        first = written["stages"][0]
        self.assertLess(first["backward_input"], 0.05 * first["backward_weight"])
        schedule = os.path.join(self.scratch.name, "recompiled.json")
        run = subprocess.run([self.conformance.tool("optpipe-compile"), self.written, "-q",
                              "--time-limit", "5", "-o", schedule], capture_output=True,
                             text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        run = subprocess.run([self.conformance.tool("optpipe"), "validate", self.written,
                              schedule], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()
