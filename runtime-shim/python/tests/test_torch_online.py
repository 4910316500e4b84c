"""Online incumbents: `PipelineSchedule(..., watch=True)` switches, between steps, to the better
schedules `optpipe-compile -o` writes while it runs. A real compile beside a 4-process gloo
training loop (examples/mlp_pipeline.py), the gradients checked at every step against a
single-process reference; and the watch alone on files replaced under it. Needs torch
(tools/setup-python.sh) and the built tools."""

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

import optpipe_rt  # noqa: E402
from built_tools import tool  # noqa: E402
from test_torch_pipeline import MIB, profile  # noqa: E402
from torch_guard import HAVE_TORCH  # noqa: E402

BUDGET = 8 * MIB  # 1F1B does not fit: every schedule here offloads


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def replace(path, source_bytes):
    """As optpipe-compile replaces its output: a temporary file renamed over the path."""
    temporary = path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(source_bytes)
    os.replace(temporary, path)


def compile_to(profile_path, out, *flags):
    subprocess.run([tool("optpipe-compile"), profile_path, "--memory-budget", str(BUDGET),
                    "--format", "bin", "-q", "-o", out, *flags], check=True)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class ScheduleWatchTest(unittest.TestCase):
    """The watch on its own: what it proposes as files replace one another under it."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory(prefix="optpipe-watch-test-")
        cls.profile = os.path.join(cls.scratch.name, "p.json")
        with open(cls.profile, "w") as f:
            json.dump(profile("loop", 1, False), f)
        cls.files = {}
        for method in ("pipeoffload", "adaoffload"):
            path = os.path.join(cls.scratch.name, method + ".opsched")
            compile_to(cls.profile, path, "--method", method, "--time-limit", "0")
            with open(path, "rb") as f:
                cls.files[method] = f.read()
        other = profile("loop", 1, False)
        other["pipeline"]["microbatches"] = 4
        other_profile = os.path.join(cls.scratch.name, "other.json")
        with open(other_profile, "w") as f:
            json.dump(other, f)
        path = os.path.join(cls.scratch.name, "other.opsched")
        compile_to(other_profile, path, "--method", "pipeoffload", "--time-limit", "0")
        with open(path, "rb") as f:
            cls.files["other"] = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def watch(self):
        from optpipe_rt.schedule_watch import ScheduleWatch
        from optpipe_rt.torch import schedule_from_bytes

        path = os.path.join(self.scratch.name, f"watched-{self.id().split('.')[-1]}.opsched")
        replace(path, self.files["pipeoffload"])
        self.loads = 0

        def load(data):
            self.loads += 1
            return schedule_from_bytes(data, path)

        def accept(schedule):
            if schedule.microbatches != 8:
                raise optpipe_rt.torch.ScheduleMismatch(
                    f"for {schedule.microbatches} microbatches")

        return path, ScheduleWatch(path, load, accept, digest(path))

    def test_proposes_a_replaced_file_once_and_forgets_it_when_it_runs(self):
        path, watch = self.watch()
        self.assertIsNone(watch.poll())
        replace(path, self.files["adaoffload"])
        candidate = watch.poll()
        self.assertEqual(candidate.digest, digest(path))
        self.assertEqual(candidate.schedule.method, "adaoffload")
        self.assertIs(watch.poll(), candidate)
        self.assertEqual(self.loads, 1)  # an unchanged file is not opened again
        watch.running(candidate.digest)
        self.assertIsNone(watch.poll())

    def test_the_running_version_written_again_is_not_proposed(self):
        path, watch = self.watch()
        replace(path, self.files["adaoffload"])
        self.assertIsNotNone(watch.poll())
        replace(path, self.files["pipeoffload"])
        self.assertIsNone(watch.poll())

    def test_a_file_that_does_not_open_or_fit_keeps_the_last_candidate_and_warns_once(self):
        path, watch = self.watch()
        replace(path, self.files["adaoffload"])
        candidate = watch.poll()
        for name, data, says in [("garbage", b"OPSCHED\0" + bytes(100), path),
                                 ("other", self.files["other"], "for 4 microbatches")]:
            replace(path, data)
            with self.assertLogs("optpipe_rt", logging.WARNING) as logged:
                self.assertIs(watch.poll(), candidate, name)
                os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
                self.assertIs(watch.poll(), candidate, name)  # the same bytes, read again
            self.assertEqual(len(logged.output), 1, logged.output)
            self.assertIn(says, logged.output[0])
            self.assertIn("the running one stays", logged.output[0])

    def test_a_missing_file_proposes_nothing(self):
        path, watch = self.watch()
        os.remove(path)
        self.assertIsNone(watch.poll())


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (tools/setup-python.sh)")
class OnlineIncumbentsTest(unittest.TestCase):
    """optpipe-compile runs beside a 4-process training loop that watches its output file."""

    @classmethod
    def setUpClass(cls):
        import mlp_pipeline

        cls.scratch = tempfile.TemporaryDirectory(prefix="optpipe-online-test-")
        cls.profile = os.path.join(cls.scratch.name, "p.json")
        with open(cls.profile, "w") as f:
            json.dump(profile("loop", 1, False), f)
        cls.path = os.path.join(cls.scratch.name, "schedule.opsched")
        # The loop starts on a slow schedule that fits; the compile then replaces it.
        compile_to(cls.profile, cls.path, "--method", "pipeoffload", "--time-limit", "0")
        cls.first = optpipe_rt.Schedule(cls.path)
        cls.first_digest = digest(cls.path)
        watch = {"ready": os.path.join(cls.scratch.name, "ready"),
                 "until": os.path.join(cls.scratch.name, "compiled")}
        cls.compile_error = None

        def compile_beside_training():
            try:
                deadline = time.monotonic() + 300
                while not os.path.exists(watch["ready"]) and time.monotonic() < deadline:
                    time.sleep(0.05)
                compile_to(cls.profile, cls.path, "--threads", "1", "--effort", "0.1")
            except Exception as error:  # reported by the test, after the loop has ended
                cls.compile_error = error
            finally:
                with open(watch["until"], "w"):
                    pass

        compiler = threading.Thread(target=compile_beside_training)
        compiler.start()
        try:
            cls.ranks = mlp_pipeline.run_many([{"schedule": cls.path, "profile": cls.profile,
                                                "watch": watch}], steps=2)[0]
        finally:
            compiler.join()
        cls.final = optpipe_rt.Schedule(cls.path)
        cls.final_digest = digest(cls.path)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def test_the_compile_ran_and_found_a_better_schedule(self):
        self.assertIsNone(self.compile_error)
        self.assertNotEqual(self.final_digest, self.first_digest)
        self.assertLess(optpipe_rt.torch.schedule_makespan(self.final),
                        optpipe_rt.torch.schedule_makespan(self.first))

    def test_every_rank_moved_to_the_final_schedule_mid_run(self):
        for r in self.ranks:
            self.assertGreaterEqual(len(r["switches"]), 1, r["rank"])
            self.assertGreaterEqual(r["switches"][0]["step"], 1, r["rank"])  # after a step ran
            self.assertEqual(r["switches"][0]["previous_method"], "pipeoffload")
            self.assertEqual(r["switches"][-1]["digest"], self.final_digest)
            self.assertEqual(r["method"], self.final.method)
            self.assertGreater(r["steps"], r["switches"][-1]["step"])

    def test_the_ranks_switched_together(self):
        first = [(s["step"], s["digest"]) for s in self.ranks[0]["switches"]]
        for r in self.ranks[1:]:
            self.assertEqual([(s["step"], s["digest"]) for s in r["switches"]], first)

    def test_each_switch_reports_its_predicted_gain(self):
        for r in self.ranks:
            previous = optpipe_rt.torch.schedule_makespan(self.first)
            for s in r["switches"]:
                self.assertAlmostEqual(s["previous_makespan"], previous, places=6)
                self.assertAlmostEqual(s["predicted_gain"], 1 - s["makespan"] / previous)
                previous = s["makespan"]
            self.assertAlmostEqual(r["predicted_makespan"],
                                   optpipe_rt.torch.schedule_makespan(self.final), places=6)

    def test_gradients_stay_exact_at_every_step(self):
        for r in self.ranks:
            self.assertTrue(r["grads_equal"], r["rank"])
            self.assertTrue(r["losses_equal"], r["rank"])

    def test_the_last_step_ran_the_final_schedules_offloads(self):
        for r in self.ranks:
            actions = self.final.actions(r["rank"])
            self.assertEqual(r["stats"]["offloads"], sum(a[0] == "OFFLOAD" for a in actions))
            self.assertEqual(r["stats"]["reloads"], sum(a[0] == "RELOAD" for a in actions))


if __name__ == "__main__":
    unittest.main()
