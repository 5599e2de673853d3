"""The bench's judgement of the fleet's ETA (bench/eta.py)."""

from __future__ import annotations

from bench.eta import EtaSample, eta_accuracy


def test_the_first_estimate_after_each_batch_is_judged_on_the_time_left() -> None:
    samples = [EtaSample(100, 1, 900), EtaSample(102, 1, 890),  # batch 1 out: estimates before any batch ended
               EtaSample(160, 2, 400), EtaSample(162, 2, 380),  # batch 1 ended: judged once
               EtaSample(240, 3, None), EtaSample(242, 3, 250)]  # no estimate at first: the next one counts
    judged = eta_accuracy(samples, started=100, ended=600)
    assert [j["after_batch"] for j in judged["after_batches"]] == [0, 1, 2]
    first = judged["after_batches"][1]
    assert (first["at_s"], first["predicted_end_s"], first["real_end_s"]) == (60, 460, 500)
    assert first["error"] == round(-40 / 440, 3) and first["error_of_makespan"] == round(-40 / 500, 3)
    assert judged["first_batch_error"] == first["error"] and judged["samples"] == 6


def test_no_estimate_after_the_first_batch_is_no_figure() -> None:
    assert eta_accuracy([EtaSample(100, 1, 50)], started=100, ended=200)["first_batch_error"] is None
