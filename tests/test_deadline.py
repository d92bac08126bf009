"""python -m repro deadline: a predicted time from a measured table, a clean stop, the same command resumes."""
from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from repro import records
from repro.cli import campaign, main
from repro.run import deadline
from repro.run.specs import select
from repro.runs import ConfigError
from repro.train import preempt

from conftest import fast_args

def _campaign(args: list[str]) -> tuple[dict, dict, list]:
    """The command's config, plan and runs, as ``python -m repro deadline`` plans them."""
    c, doc = campaign(args)
    return c, doc, select(c, doc)


NO_AUG = ["recipe.mixup=0", "recipe.cutmix=0", "recipe.aa=null", "recipe.reprob=0", "recipe.smoothing=0"]


def test_deadlines_as_durations_or_utc_times():
    now = dt.datetime(2026, 11, 26, 17, 0, tzinfo=dt.timezone.utc)
    assert [deadline.seconds_left(t, now) for t in ("25m", "1h30m", "90s", "17:20", "16:50")] == \
        [1500, 5400, 90, 1200, 86400 - 600]
    with pytest.raises(ConfigError, match="25m"):
        deadline.seconds_left("soon", now)


@pytest.mark.parametrize("text", ["25:99", "24:00", "99999999999h"])
def test_a_clock_or_duration_out_of_range_is_one_line_before_anything_runs(text, capsys):
    """25:99 was a traceback (datetime.replace); a duration past threading's longest wait killed the watch
    thread, and the campaign ran with no deadline."""
    code = main(["deadline", text, "reproduce", "paper=convit", "scale=tiny"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"error: deadline {text!r}") and "\n" not in err


def test_the_prediction_comes_from_a_measured_table(dirs, monkeypatch):
    """f100: 2 epochs x 20 batches of 8, f50: 4 x 10 (epochs x 1/f); 40 test images at the end (tiny: eval_every 0)."""
    c, _, specs = _campaign(fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2"))
    measured = []
    monkeypatch.setattr(deadline, "measure", lambda spec: measured.append(spec.run_id) or 100.0)
    p = deadline.predict(c, specs)
    assert len(measured) == 1 and p["runs"] == 2 and p["groups"] == []  # one model and batch: measured once
    assert p["seconds"] == pytest.approx((320 + 320) / 100 + 40 * 2 / (deadline.EVAL_SPEEDUP * 100))
    monkeypatch.setattr(deadline, "measure", lambda spec: pytest.fail("measured again"))
    assert deadline.predict(c, specs)["seconds"] == p["seconds"]  # the table is kept per device
    assert "this campaign: 0.1 min on cpu" in deadline.plan_line(p, 1500) and "25.0 min left" in deadline.plan_line(p, 1500)


def test_runs_names_runs_by_id_or_prefix_and_an_unknown_one_is_bad_input(dirs):
    _, _, specs = _campaign(fast_args(dirs["pid"], "tables=[table2]"))
    first = specs[0].run_id
    _, _, only = _campaign(fast_args(dirs["pid"], "tables=[table2]", f"runs=['{first[:-4]}']"))
    assert [s.run_id for s in only] == [first] and len(specs) == 2
    with pytest.raises(ConfigError, match="names no run"):
        _campaign(fast_args(dirs["pid"], "tables=[table2]", "runs=[nosuchrun]"))


def test_runs_may_name_a_run_another_table_holds_that_these_tables_start_from():
    """--hold-back names every run it keeps, sources included: CMHSA's Figure 2 warm-starts from Table
    two_phase's conv phase, and tables=[figure2] runs=[that phase] was 'names no run' on the GPU."""
    c, doc, specs = _campaign(["paper=cmhsa", "scale=tiny", "tables=[figure2]"])
    source = [s.run_id for s in specs if s.table != "figure2"]
    assert len(source) == 1 and source[0].startswith("two_phase-")
    _, _, only = _campaign(["paper=cmhsa", "scale=tiny", "tables=[figure2]", f"runs=['{source[0]}']"])
    assert [s.run_id for s in only] == source


def test_hold_back_starts_only_the_runs_predicted_to_finish(dirs, monkeypatch, capsys):
    """Two runs of 3.3 s each (320 images at 100 img/s, one evaluation): 5 s fit one on one worker, both on two;
    the command then trains only the runs kept, and a later run of it the rest."""
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2")
    c, doc, specs = _campaign(args)
    monkeypatch.setattr(deadline, "measure", lambda spec: 100.0)
    assert deadline.held_back(c, doc, 5.0) == {specs[1].run_id}
    assert deadline.held_back({**c, "jobs": 2}, doc, 5.0) == set()
    assert deadline.held_back(c, doc, 1.0) == {s.run_id for s in specs}
    monkeypatch.setattr(deadline, "seconds_left", lambda text: 65.0)  # 5 s after the 60 s margin
    assert main(["deadline", "25m", "--hold-back", "reproduce", *args, "report=false"]) == 0
    out = capsys.readouterr().out
    assert "1 run(s) held back" in out and "1 of 2 go ahead" in out
    done = {r["run_id"] for r in records.load_records(dirs["pid"], root=dirs["results"])[0]}
    assert done == {specs[0].run_id}
    assert deadline.held_back(c, doc, 5.0) == set()  # the first is recorded: the second now fits


def test_the_watch_asks_the_loop_to_stop_when_its_time_is_up(monkeypatch):
    monkeypatch.setattr(preempt, "_received", None)  # restored afterwards: later tests see no stop request
    done, fired = threading.Event(), threading.Event()
    deadline._watch(0.05, done, fired).join(5)
    assert fired.is_set() and preempt.requested() and preempt.cause() == "SIGTERM"
    monkeypatch.setattr(preempt, "_received", None)
    done, fired = threading.Event(), threading.Event()
    thread = deadline._watch(60, done, fired)
    done.set()  # the command ended first: no stop
    thread.join(5)
    assert not fired.is_set() and not preempt.requested()


@pytest.mark.slow
def test_a_deadline_stop_resumes_to_the_uninterrupted_record(dirs, tmp_path, monkeypatch, capsys):
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=3", "recipe.lr=3e-3",
                     "recipe.warmup_epochs=0", "runtime.deterministic=true", *NO_AUG)
    assert main(["reproduce", *args]) == 0
    ref = {r["run_id"]: r for r in records.load_records(dirs["pid"], root=dirs["results"])[0]}
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "deadline"))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "deadline_cache"))
    real_watch = deadline._watch

    def at_first_epoch_end(seconds, done, fired):
        """The deadline reached once the first run has logged an epoch (of 6): mid-campaign on any machine."""
        while not list((tmp_path / "deadline_cache").glob("runs/*/*/*/log.csv")) and not done.is_set():
            time.sleep(0.005)
        return real_watch(0, done, fired)
    monkeypatch.setattr(deadline, "_watch", lambda s, d, f: threading.Thread(
        target=at_first_epoch_end, args=(s, d, f), daemon=True).start())
    assert main(["deadline", "1h", "--margin", "30", "reproduce", *args]) == 0
    out = capsys.readouterr().out
    assert "this campaign:" in out and "deadline: stopped 30 s before it" in out and "run the same command" in out
    assert len(records.load_records(dirs["pid"], root=tmp_path / "deadline")[0]) < len(ref)
    monkeypatch.setattr(deadline, "_watch", real_watch)
    assert main(["deadline", "1h", "reproduce", *args]) == 0  # the same command resumes
    got = {r["run_id"]: r for r in records.load_records(dirs["pid"], root=tmp_path / "deadline")[0]}
    assert sorted(got) == sorted(ref)
    timing = ("epoch_s", "images_per_s")
    for run_id, rec in got.items():
        a, b = dict(rec["metrics"]), dict(ref[run_id]["metrics"])
        strip = lambda h: [{k: v for k, v in row.items() if k not in timing} for row in h]  # noqa: E731
        assert strip(a.pop("history")) == strip(b.pop("history")) and a == b
