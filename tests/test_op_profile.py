"""benchmarks/common.py's op-profile helpers: op kinds of trace events, self times from a
TensorFlow profiler trace (hand-built and real), the top-ops table."""

import glob
import os
import sys

import pytest
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import common  # noqa: E402


def test_op_kinds():
    assert common.op_kind("gradient_tape/MatMul/MatMul:_MklMatMul") == "_MklMatMul"
    assert common.op_kind("Softmax:Softmax") == "Softmax"
    assert common.op_kind("fusion.12") == "fusion"
    assert common.op_kind("dot.3") == "dot"
    for runtime in ("KernelAndDeviceFunc::Run", "ExecutorState::Process",
                    "__inference_f_63:__inference_f_63", "EagerLocalExecute: __inference_f"):
        assert common.op_kind(runtime) == common.RUNTIME_ROW


def _write_space(path, lines):
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    names = sorted({name for events in lines.values() for name, _, _ in events})
    for i, name in enumerate(names, 1):
        plane.event_metadata[i].id = i
        plane.event_metadata[i].name = name
    for line_name, events in lines.items():
        line = plane.lines.add(name=line_name)
        for name, start, duration in events:
            line.events.add(metadata_id=names.index(name) + 1, offset_ps=start,
                            duration_ps=duration)
    other = space.planes.add(name="/device:GPU:0")  # not a host plane: left out
    other.event_metadata[1].name = "ignored"
    other.lines.add(name="x").events.add(metadata_id=1, offset_ps=0, duration_ps=10 ** 12)
    with open(path, "wb") as f:
        f.write(space.SerializeToString())


def test_self_times_subtract_nested_events(tmp_path):
    us = 10 ** 6  # picoseconds per microsecond
    path = str(tmp_path / "t.xplane.pb")
    _write_space(path, {
        # The caller: Run (10 us) with BlockUntilReady (4 us) nested; then a Python event.
        "python": [("KernelAndDeviceFunc::Run", 0, 10 * us), ("BlockUntilReady", 5 * us, 4 * us),
                   ("f", 20 * us, 3 * us)],
        # A pool thread: Process (8 us) holding two ops (2 and 5 us), a nested op in one.
        "tf_Compute/1": [("ExecutorState::Process", 0, 8 * us), ("MatMul:_MklMatMul", 0, 5 * us),
                         ("Softmax:_MklSoftmax", 5 * us, 2 * us),
                         ("inner:_MklSoftmax", 5 * us, 1 * us),
                         ("ThreadpoolListener::Record", 9 * us, 0)],
    })
    totals = common.xplane_self_times(path)
    seconds = {k: round(v * 1e6, 6) for k, v in totals.items()}  # microseconds
    # Runtime: Run 10-4 = 6, BlockUntilReady 4, Process 8-5-2 = 1.
    assert seconds == {common.RUNTIME_ROW: 11.0, "_MklMatMul": 5.0, "_MklSoftmax": 2.0,
                       "f": 3.0}
    table = common.top_ops(totals, 2)
    assert table["runtime_s"] == pytest.approx(11e-6)
    assert table["total_s"] == pytest.approx(10e-6, abs=1e-9)
    assert [(r["op"], r["share"]) for r in table["top"]] == [("_MklMatMul", 0.5), ("f", 0.3)]


def test_self_times_of_a_real_trace(tmp_path):
    w = tf.Variable(tf.random.normal([64, 64]))

    @tf.function
    def step(x):
        return tf.reduce_sum(tf.nn.softmax(tf.matmul(x, w)))

    x = tf.random.normal([32, 64])
    step(x)
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(3):
        step(x).numpy()
    tf.profiler.experimental.stop()
    (path,) = glob.glob(str(tmp_path / "plugins" / "profile" / "*" / "*.xplane.pb"))
    totals = common.xplane_self_times(path)
    assert any(k.endswith("MatMul") for k in totals), sorted(totals)
    assert any(k.endswith("Softmax") for k in totals), sorted(totals)
    assert totals.get(common.RUNTIME_ROW, 0) > 0
