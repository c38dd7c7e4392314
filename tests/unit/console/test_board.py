"""JobBoard and TrackedJob: statuses from the report, the log tail, the board's own bound."""

from __future__ import annotations

import logging

import pytest

from tfbatch.console.board import JobBoard


def test_status_follows_the_report_as_sagemaker_names_it():
    board = JobBoard()
    cases = {"ok": ({"objects": 3}, "Completed", None),
             "bad-records": ({"objects": 3, "failed": 1}, "Failed", "1 objects had failed records"),
             "stopped": ({"objects": 3, "stopped": "too many failures"}, "Stopped", "too many failures"),
             "fatal": ({"objects": 0, "fatal": ["instance 0: model did not load"]}, "Failed", "instance 0: model")}
    for name, (report, status, message) in cases.items():
        job = board.start(name)
        job.finish(report)
        detail = board.job(name)
        assert detail.row.status == status and detail.row.final
        assert (detail.message or "").startswith(message or "")
    crashed = board.start("crashed")
    crashed.fail(ValueError("output is locked by another job"))
    assert board.job("crashed").message == "output is locked by another job"
    with pytest.raises(ValueError, match="already on the board"):
        board.start("ok")


def test_log_tail_takes_what_the_program_logs_without_changing_levels():
    board = JobBoard()
    job = board.start("logged")
    log = logging.getLogger("tfbatch.console-test")
    parent = logging.getLogger("tfbatch")
    before = parent.level
    undo = job.capture_logs()
    try:
        assert parent.level == before  # stderr gets exactly what it got before
        log.warning("object <b>x</b> failed")
        log.debug("not shown")
    finally:
        undo()
    log.warning("after the job")
    tail = board.log_tail("logged")
    assert len(tail) == 1 and tail[0].endswith("WARNING tfbatch.console-test: object <b>x</b> failed")


def test_the_board_forgets_its_oldest_finished_jobs_past_its_bound():
    board = JobBoard(max_jobs=3)
    running = board.start("running")
    running.created = 0.0  # the oldest, but still running: kept
    for i in range(4):
        job = board.start(f"done-{i}")
        job.created = 1.0 + i
        job.finish({"objects": 1})
    names = [r.name for r in board.list_jobs().rows]
    assert len(names) <= 4 and "running" in names and "done-0" not in names


def test_settings_name_who_chose_each_and_show_differences_per_instance():
    from tfbatch.console.source import settings_from_report

    def lane(size, by):
        return {"lane": "dataflow", "predict": "image-batch", "max_batch_size": size, "workers": 2,
                "in_flight_objects": 48, "chosen_by": {"max_batch_size": by, "workers": "default"}}

    report = {"instances": 2, "concurrency": 32,
              "batches": {"0:m/1/serving_default": lane(16, "tuner"), "1:m/1/serving_default": lane(32, "tuner")}}
    shown = {(s.name, s.value, s.chosen_by) for s in settings_from_report(report)}
    assert ("m/1/serving_default predict", "image-batch", "tfbatch (what the model and script allow)") in shown
    assert ("m/1/serving_default workers", "2", "default") in shown  # the same on both: once
    assert ("m/1/serving_default batch size (instance 0)", "16", "tuner") in shown  # differs: per instance
    assert ("m/1/serving_default batch size (instance 1)", "32", "tuner") in shown
    assert ("instances", "2", "job") in shown and settings_from_report({}) == []
