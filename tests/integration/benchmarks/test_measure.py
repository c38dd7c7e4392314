"""Measurement helpers: output timing, peak RSS of a process tree, CPU seconds."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.common.measure import TreeMonitor, agreement, output_timing, wait_logged


def test_steady_rate_ignores_the_first_burst(tmp_path):
    # 10 outputs at t=100 (one batch), then 10 more at 101, 102: 20 images in 2 s.
    names = iter(range(30))
    for t in (100.0, 101.0, 102.0):
        for _ in range(10):
            path = tmp_path / f"{next(names)}.out"
            path.write_bytes(b"{}")
            os.utime(path, (t, t))
    timing = output_timing(tmp_path)
    assert timing.outputs == 30
    assert timing.first_output == 100.0 and timing.last_output == 102.0
    assert timing.steady_images_per_s == 10.0


def test_peak_rss_sees_a_child_of_a_child_and_cpu_is_counted(tmp_path):
    inner = ("import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
             "x = bytearray(300 * 2**20)\ntime.sleep(0.5)")
    outer = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {inner!r}])"
    with TreeMonitor(interval_s=0.02) as rss:
        proc = subprocess.Popen([sys.executable, "-c", outer])
        rss.watch(proc.pid)
        error, cpu = wait_logged(proc, tmp_path / "none.log", 60)
    assert error is None
    assert rss.peak_bytes > 300 * 2**20
    assert cpu >= 0.6  # wait4 counts the reaped grandchild's busy loop
    # The samples saw the grandchild's CPU while it ran, and never go backwards.
    cpus = [c for _, c in rss.cpu_samples]
    assert cpus == sorted(cpus) and cpus[-1] >= 0.4
    assert rss.cpu_at(rss.cpu_samples[0][0]) == cpus[0]
    assert rss.cpu_at(rss.cpu_samples[0][0] - 10) is None


def test_failure_reports_the_log_tail(tmp_path):
    log = tmp_path / "p.log"
    with open(log, "wb") as handle:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], stdout=handle)
    error, _ = wait_logged(proc, log, 60)
    assert error == "exit code 3: boom"


def test_agreement_counts_matching_classes():
    ref = {"a.out": (1, [0.1, 0.9]), "b.out": (0, [0.6, 0.4])}
    other = {"a.out": (1, [0.1, 0.9]), "b.out": (1, [0.4, 0.6])}
    result = agreement(ref, other)
    assert result["files"] == 2 and result["same_class"] == 1
    assert abs(result["max_abs_prob_diff"] - 0.2) < 1e-9
