"""The py-spy raw-file reader the profile breakdowns share."""

from __future__ import annotations

from benchmarks.transform.profile import phases, script_phases
from benchmarks.transform.profile.pyspy_raw import phase_of, samples, split_process

RAW = """MainThread;<module> (cli.py:1);encode_predict (tfs/codec.py:9) 7

process 1:"tfbatch";process 2:"spawn_main";MainThread;input_handler (inference.py:4);b64encode (x:1) 13
process 1:"tfbatch";Thread-3;zzz (nothing.py:1) 1
no-count-here
"""


def test_samples_processes_and_leaf_first_phases(tmp_path):
    path = tmp_path / "raw.txt"
    path.write_text(RAW)
    got = list(samples(str(path)))
    assert [n for _f, n in got] == [7, 13, 1]
    assert split_process(got[1][0]) == ('process 2:"spawn_main"', ["input_handler (inference.py:4)", "b64encode (x:1)"])
    assert split_process(got[0][0]) == ("MainThread", ["encode_predict (tfs/codec.py:9)"])
    table = [("hooks", ("input_handler",)), ("b64", ("b64encode",))]
    assert phase_of(got[1][0], table, "other") == "b64"  # the leaf-most match wins
    assert phase_of(got[2][0], table, "other") == "other"


def test_the_breakdowns_read_it_alike(tmp_path):
    path = tmp_path / "raw.txt"
    path.write_text(RAW)
    by_thread = phases.analyse(str(path), rate=100, images=1)
    assert by_thread["thread_ms_per_image_by_phase"]["output encode (JSON dumps)"] == 70.0
    gil = script_phases.analyse(str(path), rate=100, images=1)
    assert gil["processes"] == {"main process": 2, "handler workers": 1}
    assert gil["gil_ms_per_image"]["handler workers"]["total"] == 130.0


def test_thread_busy_groups_threads_and_leaves_waits_out(tmp_path):
    from benchmarks.transform.profile.thread_busy import summarise

    path = tmp_path / "raw.txt"
    path.write_text(
        'process 1:"tfbatch";thread (0x1): dataflow_0;_chunk (tfbatch/transform/dataflow.py:5);'
        "quick_execute (tensorflow/execute.py:53) 5\n"
        'process 1:"tfbatch";thread (0x2): dataflow_1;_chunk (tfbatch/transform/dataflow.py:5);'
        "wait (threading.py:320) 4\n"
        'process 1:"tfbatch";process 2:"w";thread (9): MainThread;call_user (tfbatch/handlers/service.py:267);'
        "iterencode (json/encoder.py:258) 3\n"
    )
    busy, idle, leaves = summarise(str(path))
    assert busy == {"dataflow_N": 5, "MainThread": 3} and idle == {"dataflow_N": 4}
    assert leaves["dataflow_N"] == {"_chunk (tfbatch/transform/dataflow.py:5) || "
                                    "quick_execute (tensorflow/execute.py:53)": 5}
