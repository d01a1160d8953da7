#!/usr/bin/env python3
# scripts/compare_logits.py on small synthetic logits files (CPU only, numpy): the literal criterion, the envelope
# criterion (--envelope), the exit status per --gate, the JSON record and bad-input errors. Run by ctest
# (label "golden") as `python3 tests/golden/test_compare_logits.py`.
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "compare_logits.py")
T, V = 60, 48


def rows_with_rel_err(ref, rel, rng):
    """ref + a random direction per row scaled so that row t has relative L2 error exactly rel[t]; columns 0 and 1
    (the argmax candidates) are left alone so that argmax flips happen only where a test asks for them."""
    d = rng.standard_normal(ref.shape)
    d[:, :2] = 0
    d *= (np.asarray(rel)[:, None] * np.linalg.norm(ref, axis=1, keepdims=True) / np.linalg.norm(d, axis=1,
                                                                                                   keepdims=True))
    return ref + d


class CompareLogits(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.rng = np.random.default_rng(1234)
        ref = self.rng.standard_normal((T, V))
        ref[:, 0] = 4.0  # the argmax; every 5th row has a near tie with column 1, which flip_argmax can flip
        ref[:, 1] = 3.0
        ref[::5, 1] = 3.95
        self.ref = ref

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, arr):
        p = os.path.join(self.tmp.name, name)
        np.asarray(arr, dtype="<f4").tofile(p)
        return p

    def run_cmp(self, ours, env=None, *extra):
        js = os.path.join(self.tmp.name, "out.jsonl")
        if os.path.exists(js):
            os.remove(js)
        args = [sys.executable, SCRIPT, "--ours", ours, "--ref", self.write("ref.bin", self.ref), "--vocab", str(V),
                "--label", "case", "--json", js, *extra]
        if env is not None:
            args += ["--envelope", env]
        r = subprocess.run(args, capture_output=True, text=True)
        rec = None
        if os.path.exists(js):
            with open(js) as f:
                lines = f.read().splitlines()
            self.assertEqual(len(lines), 1)
            rec = json.loads(lines[0])
        return r, rec

    def flip_argmax(self, arr, rows):
        """Swaps the near tie of the given rows (multiples of 5): a 0.1 change of one logit of a row of norm ~8."""
        arr = arr.copy()
        for t in rows:
            assert t % 5 == 0
            arr[t, 1] = arr[t, 0] + 0.05
        return arr

    def test_literal_figures_are_exact(self):
        rel = np.linspace(1e-3, 1e-2, T)
        ours = rows_with_rel_err(self.ref, rel, self.rng)
        r, rec = self.run_cmp(self.write("ours.bin", ours))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("literal PASS", r.stdout)
        ours32 = ours.astype("<f4").astype(np.float64)
        ref32 = self.ref.astype("<f4").astype(np.float64)
        want = np.linalg.norm(ours32 - ref32, axis=1) / np.linalg.norm(ref32, axis=1)
        self.assertAlmostEqual(rec["rel_max"], want.max(), places=12)
        self.assertAlmostEqual(rec["rel_median"], float(np.median(want)), places=12)
        self.assertAlmostEqual(rec["rel_p90"], float(np.percentile(want, 90)), places=12)
        self.assertEqual(rec["argmax_agreement"], 1.0)
        self.assertTrue(rec["literal_pass"] and rec["pass"] and rec["gate_pass"])
        self.assertEqual(rec["gate"], "literal")
        self.assertNotIn("envelope", rec)

    def test_literal_fails_on_one_spike_and_on_argmax(self):
        rel = np.full(T, 1e-3)
        rel[17] = 3e-2
        r, rec = self.run_cmp(self.write("ours.bin", rows_with_rel_err(self.ref, rel, self.rng)))
        self.assertEqual(r.returncode, 1)
        self.assertIn("literal FAIL", r.stdout)
        self.assertEqual(rec["rel_max_pos"], 17)
        ours = self.flip_argmax(self.ref, [10])  # 1 of 60 rows: 98.3% < 99%
        r, rec = self.run_cmp(self.write("ours.bin", ours))
        self.assertEqual(r.returncode, 1)
        self.assertAlmostEqual(rec["argmax_agreement"], 59 / 60)
        self.assertFalse(rec["literal_pass"])

    def test_envelope_passes_when_ours_is_within_the_references_own_spread(self):
        # The reference's own spread: median 0.04, p90 ~0.3, one argmax flip in ten; literal fails for both.
        env_rel = np.full(T, 0.04)
        env_rel[::10] = 0.3
        env = self.flip_argmax(rows_with_rel_err(self.ref, env_rel, self.rng), range(0, T, 10))
        ours_rel = np.full(T, 0.05)
        ours_rel[::10] = 0.35
        ours = self.flip_argmax(rows_with_rel_err(self.ref, ours_rel, self.rng), list(range(0, T, 10)) + [5])
        r, rec = self.run_cmp(self.write("ours.bin", ours), self.write("env.bin", env))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("literal FAIL", r.stdout)  # never hidden
        self.assertIn("the reference itself FAILS the literal criterion", r.stdout)
        self.assertIn("envelope PASS", r.stdout)
        self.assertFalse(rec["literal_pass"])
        self.assertFalse(rec["pass"])
        self.assertTrue(rec["envelope_pass"] and rec["gate_pass"])
        self.assertEqual(rec["gate"], "envelope")
        e = rec["envelope"]
        self.assertAlmostEqual(e["rel_median"], 0.04, delta=1e-3)
        self.assertAlmostEqual(e["argmax_agreement"], 0.9)
        self.assertFalse(e["literal_pass"])
        lim = rec["envelope_limits"]
        self.assertAlmostEqual(lim["rel_median"], 1.5 * e["rel_median"])
        self.assertAlmostEqual(lim["rel_p90"], 1.5 * e["rel_p90"])
        self.assertAlmostEqual(lim["argmax_agreement"], 0.88)
        self.assertAlmostEqual(rec["argmax_agreement"], 53 / 60)
        # --gate literal / both: the same figures, the exit status follows the literal verdict.
        for gate in ("literal", "both"):
            r, rec = self.run_cmp(self.write("ours.bin", ours), self.write("env.bin", env), "--gate", gate)
            self.assertEqual(r.returncode, 1, gate)
            self.assertTrue(rec["envelope_pass"])
            self.assertFalse(rec["gate_pass"])

    def test_envelope_fails_on_median_p90_or_argmax(self):
        env_rel = np.full(T, 0.04)
        env = rows_with_rel_err(self.ref, env_rel, self.rng)
        envp = self.write("env.bin", env)
        # median 1.6x the envelope's: fail (limit 1.5x = 0.06).
        r, rec = self.run_cmp(self.write("ours.bin", rows_with_rel_err(self.ref, np.full(T, 0.064), self.rng)), envp)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("envelope FAIL", r.stdout)
        self.assertLessEqual(rec["envelope_limits"]["rel_median"], 0.0600001)
        # median fine, 20% of positions at 0.2: p90 0.2 > 0.06: fail.
        rel = np.full(T, 0.03)
        rel[:12] = 0.2
        r, rec = self.run_cmp(self.write("ours.bin", rows_with_rel_err(self.ref, rel, self.rng)), envp)
        self.assertEqual(r.returncode, 1)
        self.assertAlmostEqual(rec["rel_median"], 0.03, places=6)
        self.assertGreater(rec["rel_p90"], rec["envelope_limits"]["rel_p90"])
        # errors small, but 2 argmax flips (96.7%) against an envelope with none (limit 98%): fail.
        ours = self.flip_argmax(rows_with_rel_err(self.ref, np.full(T, 1e-3), self.rng), [5, 15])
        r, rec = self.run_cmp(self.write("ours.bin", ours), envp)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(rec["envelope"]["argmax_agreement"], 1.0)
        self.assertAlmostEqual(rec["envelope_limits"]["argmax_agreement"], 0.98)

    def test_envelope_floor(self):
        # A near-zero envelope: the limits are the 2e-2 floor, not 1.5 x ~0.
        env = rows_with_rel_err(self.ref, np.full(T, 1e-6), self.rng)
        ours = rows_with_rel_err(self.ref, np.full(T, 1.5e-2), self.rng)
        r, rec = self.run_cmp(self.write("ours.bin", ours), self.write("env.bin", env))
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(rec["envelope_limits"]["rel_median"], 2e-2)
        self.assertEqual(rec["envelope_limits"]["rel_p90"], 2e-2)
        r, rec = self.run_cmp(self.write("ours.bin", ours), self.write("env.bin", env), "--envelope-floor", "1e-2")
        self.assertEqual(r.returncode, 1, r.stdout)

    def test_non_finite_ours_fails_both(self):
        ours = self.ref.copy()
        ours[7, 3] = np.nan
        env = rows_with_rel_err(self.ref, np.full(T, 0.05), self.rng)
        r, rec = self.run_cmp(self.write("ours.bin", ours), self.write("env.bin", env), "--gate", "both")
        self.assertEqual(r.returncode, 1)
        self.assertIn("non-finite logits (first at row 7)", r.stderr)
        self.assertEqual(rec["rel_max"], float("inf"))
        self.assertEqual(rec["rel_max_pos"], 7)
        self.assertFalse(rec["literal_pass"])

    def test_bad_input_exits_2_naming_the_file(self):
        ours = self.write("ours.bin", self.ref)
        short = self.write("short.bin", self.ref[:10])
        r, _ = self.run_cmp(ours, short)
        self.assertEqual(r.returncode, 2)
        self.assertIn("short.bin has 10 rows", r.stderr)
        r, _ = self.run_cmp(ours, os.path.join(self.tmp.name, "missing.bin"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.bin: no such file", r.stderr)
        odd = self.write("odd.bin", np.zeros(V + 1))
        r, _ = self.run_cmp(odd)
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"odd.bin: {V + 1} floats is not a positive multiple of vocab {V}", r.stderr)
        r, _ = self.run_cmp(ours, None, "--gate", "envelope")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gate envelope needs --envelope", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
