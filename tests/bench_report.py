#!/usr/bin/python3
"""tests/bench_report.py - the verdicts of bench/run.py's report, from fixed results.

The bench judges its goals from one run's numbers; nothing here runs a benchmark. Each case
builds result rows as the peers print them, changes one number or drops one row, and checks
the verdict the report gives: met, NOT met, or not measured (a missing peer or row is never
"met"). The busy warning is checked the same way, from a run's header values.
"""
import copy
import importlib.util
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("bench_run", os.path.join(ROOT, "bench", "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

INFO = {"machine": "2 CPUs (nproc), test CPU, 24.0 GiB RAM",
        "load average (start → end)": "0.10 → 45.00",
        run.OTHER_CPU: "2.0% (10 s of other processes and 0 s of steal, of 500 CPU s)"}
NS = (1, 100, 1000)
# The rows of section 8 that are libasp's, each of which must meet every goal.
MANY_OURS = ("libasp", "libasp (16 threads)", "libasp (16 threads; all open)", "node libasp", "python libasp aio")
PHASES = ("open", "exec", "write", "read", "close")


def many_row(peer, n, wall, rss_mib, threads, scpu, slowest_ms, rss0_mib=20.0):
    """One "many" result as a peer prints it and the runner completes it; slowest_ms: every
    phase's slowest call."""
    return {"workload": "many", "op": "many", "peer": peer, "program": peer, "n": n, "wall_s": wall,
            "cpu_s": 1.0, "peak_threads": threads, "proc_maxrss_kb": rss_mib * 1024,
            "rss0_kb": rss0_mib * 1024, "peak_open": n, "samples": [wall], "sandbox_cpu_s": scpu,
            "phases": {k: [slowest_ms / 2, slowest_ms] for k in PHASES}}


def good_run():
    """Every libasp row meets every goal of section 8 against asyncssh at every N: half its wall
    time, 0.4x its RSS, threads that do not grow with N, calls no slower than with one sandbox
    by more than half of the sandbox CPU / 2 CPUs allowed."""
    rows = []
    for n in NS:
        scpu = 0.02 * n                      # allowed: scpu / 2 CPUs = 0.01 s per sandbox
        rows.append(many_row("asyncssh", n, 2.0 + n / 100, 40 + n / 10, 3, scpu, 100 + 10 * n))
        for p in MANY_OURS:
            threads = n + 2 if p == "libasp" else 12   # the C row: a caller thread per sandbox
            rows.append(many_row(p, n, 1.0 + n / 200, 16 + n / 25, threads, scpu, 100 + 5 * n))
    return rows


def report(rows, info=INFO):
    runner = run.types.SimpleNamespace(results=rows, skipped={}, failed={}, scale=dict(run.SCALES["quick"]),
                                       algorithms={})
    return run.Report(runner, "quick", "test", dict(info))


def verdicts(rows):
    """{goal text: (ok, detail)} of section 8's goals."""
    got = {}
    report(rows).many_goals(lambda text, ok, detail: got.__setitem__(text, (ok, detail)))
    assert set(got) == set(run.Report.MANY_GOALS), got
    return got


WALL, RSS, THREADS, CALLS = run.Report.MANY_GOALS


def edit(rows, peer, n, **kw):
    for d in rows:
        if d["peer"] == peer and d["n"] == n:
            for k, v in kw.items():
                if k == "slowest_ms":
                    d["phases"]["write"][1] = v
                else:
                    d[k] = v
            return rows
    raise KeyError((peer, n))


def drop(rows, peer, n=None):
    return [d for d in rows if not (d["peer"] == peer and (n is None or d["n"] == n))]


class ManyGoals(unittest.TestCase):
    def assertVerdicts(self, got, want):
        self.assertEqual({t: got[t][0] for t in want}, want, got)

    def test_all_met(self):
        self.assertVerdicts(verdicts(good_run()), {WALL: True, RSS: True, THREADS: True, CALLS: True})

    def test_each_row_judged(self):
        # One row over at one N turns the goal, and only that goal, NOT met, for each libasp row.
        for p in MANY_OURS:
            with self.subTest(peer=p):
                got = verdicts(edit(good_run(), p, 100, wall_s=3.5))   # asyncssh: 3.0 s
                self.assertVerdicts(got, {WALL: False, RSS: True, THREADS: True, CALLS: True})
                self.assertIn("(over at N=100)", got[WALL][1])
                got = verdicts(edit(good_run(), p, 1000, proc_maxrss_kb=80 * 1024))  # asyncssh: 140 MiB
                self.assertVerdicts(got, {WALL: True, RSS: False, THREADS: True, CALLS: True})

    def test_rss_limit_is_half(self):
        # asyncssh at N=100: 50 MiB. 25 MiB is 0.5x (met), 25.5 is over.
        self.assertTrue(verdicts(edit(good_run(), "node libasp", 100, proc_maxrss_kb=25 * 1024))[RSS][0])
        self.assertFalse(verdicts(edit(good_run(), "node libasp", 100, proc_maxrss_kb=25.5 * 1024))[RSS][0])

    def test_threads(self):
        # A thread per sandbox between the two largest N: NOT met, for any row but the C one.
        got = verdicts(edit(good_run(), "python libasp aio", 1000, peak_threads=12 + 900))
        self.assertVerdicts(got, {THREADS: False})
        self.assertIn("python libasp aio 12 → 912 at N=100 → 1000 (grew)", got[THREADS][1])
        # Fewer than one more per ten more sandboxes: met (89 for 900 more).
        self.assertTrue(verdicts(edit(good_run(), "python libasp aio", 1000, peak_threads=12 + 89))[THREADS][0])
        self.assertFalse(verdicts(edit(good_run(), "python libasp aio", 1000, peak_threads=12 + 91))[THREADS][0])
        # The C row's threads are its callers': not judged, even when they grow with N.
        got = verdicts(good_run())
        self.assertIn("libasp not judged", got[THREADS][1])
        # With the C row alone nothing is judged: not measured, never met.
        rows = [d for d in good_run() if d["peer"] in ("libasp", "asyncssh")]
        self.assertIsNone(verdicts(rows)[THREADS][0])

    def test_calls(self):
        # N=1000: the N=1 call took 105 ms, the sandbox side's CPU 20 s on 2 CPUs allows 10 s more.
        ok = verdicts(edit(good_run(), "libasp (16 threads)", 1000, slowest_ms=105 + 9_900))
        self.assertTrue(ok[CALLS][0], ok[CALLS][1])
        got = verdicts(edit(good_run(), "libasp (16 threads)", 1000, slowest_ms=105 + 10_100))
        self.assertVerdicts(got, {WALL: True, RSS: True, THREADS: True, CALLS: False})
        self.assertIn("libasp (16 threads): write at N=1000, +10.10 s, allowed 10.00 s", got[CALLS][1])
        # The allowance is the sandbox CPU over the machine's CPUs, not over one.
        rows = edit(good_run(), "libasp (16 threads)", 1000, slowest_ms=105 + 10_100)
        got = {}
        report(rows, dict(INFO, machine="1 CPUs (nproc), test CPU, 24.0 GiB RAM")).many_goals(
            lambda t, ok, d: got.__setitem__(t, ok))
        self.assertTrue(got[CALLS])
        # No sandbox CPU for a row: that row is not measured, so neither is the goal.
        self.assertIsNone(verdicts(edit(good_run(), "node libasp", 100, sandbox_cpu_s=None))[CALLS][0])

    def test_missing_asyncssh_is_not_measured(self):
        got = verdicts(drop(good_run(), "asyncssh", 100))
        self.assertVerdicts(got, {WALL: None, RSS: None})
        self.assertIn("asyncssh did not run at N=100", got[WALL][1])
        # Even when a row is over elsewhere: a missing peer never gives a verdict either way.
        got = verdicts(edit(drop(good_run(), "asyncssh", 100), "libasp", 1000, wall_s=99.0))
        self.assertIsNone(got[WALL][0])

    def test_missing_one_sandbox_reference(self):
        got = verdicts(drop(good_run(), "node libasp", 1))
        self.assertIsNone(got[CALLS][0])
        self.assertIn("node libasp: no N=1 row", got[CALLS][1])

    def test_missing_row_is_not_measured(self):
        # A run without one of libasp's rows (e.g. --peers libasp,asyncssh) judges no goal,
        # even one every row that ran met or missed.
        for p in MANY_OURS:
            with self.subTest(peer=p):
                got = verdicts(drop(good_run(), p))
                self.assertVerdicts(got, {WALL: None, RSS: None, THREADS: None, CALLS: None})
                self.assertIn("did not run: %s" % p, got[WALL][1])
                bad = edit(drop(good_run(), p), "asyncssh", 100, wall_s=0.1)
                self.assertIsNone(verdicts(bad)[WALL][0])

    def test_no_rows(self):
        got = verdicts([])
        self.assertVerdicts(got, {WALL: None, RSS: None, THREADS: None, CALLS: None})

    def test_one_n_only(self):
        rows = [d for d in good_run() if d["n"] == 100]
        got = verdicts(rows)
        self.assertVerdicts(got, {WALL: True, THREADS: None, CALLS: None})


class PeerGoals(unittest.TestCase):
    """Goals against a peer: with that peer missing, not measured."""

    def goal(self, rows, start):
        g = [x for x in report(rows).goals() if x[0].startswith(start)]
        self.assertEqual(len(g), 1, g)
        return g[0]

    def conc(self, peer, n, wall):
        return {"workload": "conc", "op": "conc_exec", "peer": peer, "program": peer, "callers": 16,
                "samples": [1.0] * n, "wall_s": wall}

    def test_throughput_vs_asyncssh(self):
        rows = [self.conc("libasp", 300, 1.0), self.conc("asyncssh", 100, 1.0)]
        self.assertTrue(self.goal(rows, "16 concurrent callers")[1])
        rows[0]["samples"] = [1.0] * 140
        self.assertFalse(self.goal(rows, "16 concurrent callers")[1])
        t, ok, detail = self.goal(rows[:1], "16 concurrent callers")
        self.assertIsNone(ok)
        self.assertEqual(detail, "asyncssh did not run")

    def cold(self, peer, ms):
        return {"workload": "wan_cold", "op": "cold", "peer": peer, "program": peer, "samples": [ms]}

    def test_best_peer_needs_every_peer(self):
        peers = sorted({"ssh fresh" if p.name == "cli" else p.name for p in run.PEERS
                        if "wan" in p.workloads and p.name not in run.OURS})
        rows = [self.cold("libasp", 150)] + [self.cold(p, 200) for p in peers]
        self.assertTrue(self.goal(rows, "connect + first exec")[1])
        rows[1]["samples"] = [100]
        self.assertFalse(self.goal(rows, "connect + first exec")[1])
        # Without the one peer that beat it, the rest would say met: not measured instead.
        t, ok, detail = self.goal([rows[0]] + rows[2:], "connect + first exec")
        self.assertIsNone(ok)
        self.assertIn(peers[0], detail)


class Busy(unittest.TestCase):
    def info(self, start, end, other=None):
        i = dict(INFO)
        i["load average (start → end)"] = "%.2f → %.2f" % (start, end)
        if other is None:
            del i[run.OTHER_CPU]
        else:
            i[run.OTHER_CPU] = "%.1f%% (1 s of other processes and 0 s of steal, of 100 CPU s)" % other
        return i

    def test_rules(self):
        # The end load is the run's own (section 8 raises it): a quiet machine is not busy.
        self.assertFalse(run.busy(self.info(0.2, 45.0, 2.0))[0])
        self.assertFalse(run.busy(self.info(0.2, 45.0, run.OTHER_CPU_BUSY_PCT))[0])
        self.assertTrue(run.busy(self.info(0.2, 45.0, run.OTHER_CPU_BUSY_PCT + 0.1))[0])
        self.assertTrue(run.busy(self.info(0.2, 1.0, 39.6))[0])
        # Busy at the start: above half the CPUs.
        self.assertFalse(run.busy(self.info(1.0, 1.0, 0.0))[0])
        self.assertTrue(run.busy(self.info(1.1, 1.0, 0.0))[0])
        # Results from before the other processes' CPU was measured: either load.
        self.assertFalse(run.busy(self.info(0.5, 0.9))[0])
        self.assertTrue(run.busy(self.info(0.5, 1.5))[0])

    def test_report_says_so(self):
        warn = "The machine was busy during this run"
        self.assertNotIn(warn, report([], self.info(0.2, 45.0, 2.0)).markdown())
        self.assertIn(warn, report([], self.info(0.2, 45.0, 39.6)).markdown())

    def test_other_cpu(self):
        # 150 s of the machine's user+system, 40 of them the run's own, 5 s of steal, over 50 s.
        text = run.other_cpu((1000.0, 10.0, 5.0), (1150.0, 15.0, 45.0), 50.0)
        total = 50.0 * os.cpu_count()
        self.assertTrue(text.startswith("%.1f%% (110 s of other processes and 5 s of steal" % (100 * 115 / total)),
                        text)
        # The run's own CPU is never counted as other processes' (nor below zero).
        self.assertTrue(run.other_cpu((0.0, 0.0, 0.0), (10.0, 0.0, 12.0), 10.0).startswith("0.0%"))
        info = dict(INFO, **{run.OTHER_CPU: text})
        self.assertEqual(run.busy(info)[0], 100 * 115 / total > run.OTHER_CPU_BUSY_PCT)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=1).result.wasSuccessful() else 1)
