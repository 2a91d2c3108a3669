"""The checks every method gets (keras-hub's test_case pattern): a test file declares one
short class per method, e.g.

    class TestSCDHarness(MethodHarness):
        def build(self, encoder):
            return SCD(encoder, projector_width=32)

and pytest runs each `test_*` below for it, on the tiny encoder of conftest
(`tiny_method_encoder`) and the shared sample rows (`RAW`, by the model's `input_kind`).
A new method gets the whole harness by adding its class. (`fit` on a tf.data.Dataset of raw
examples, batched or not, is tests/test_keras_native.py's, for each data kind.)"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import PROBE, RAW, tiny_method_encoder
from tfsent.errors import ConfigError
from tfsent.serving import SavedModelEncoder


def strip_names(config):
    """A config without auto-generated object names (they differ between instances)."""
    if isinstance(config, dict):
        return {k: strip_names(v) for k, v in config.items() if k != "name"}
    if isinstance(config, list):
        return [strip_names(v) for v in config]
    return config


def string_dataset(rows, batch):
    """A tf.data.Dataset of rows (strings, tuples or dicts), batched by `batch` or not."""
    if isinstance(rows[0], dict):
        ds = tf.data.Dataset.from_tensor_slices({k: [r[k] for r in rows] for k in rows[0]})
    elif isinstance(rows[0], tuple):
        ds = tf.data.Dataset.from_tensor_slices(tuple(list(c) for c in zip(*rows)))
    else:
        ds = tf.data.Dataset.from_tensor_slices(rows)
    return ds.batch(batch) if batch else ds


class MethodHarness:
    """Base of the per-method harness classes (not collected itself: no `Test` prefix)."""

    def build(self, encoder):
        """The method under test on `encoder` (a subclass's one line)."""
        raise NotImplementedError

    def model(self):
        """A fresh instance on the tiny encoder."""
        return self.build(tiny_method_encoder())

    def test_config_round_trip(self):
        model = self.model()
        config = model.get_config()
        clone = type(model).from_config(config)
        assert strip_names(clone.get_config()) == strip_names(config)
        assert keras.saving.get_registered_name(type(model)) == \
            f"tfsent>{type(model).__name__}"

    def test_raw_fit_evaluate_and_validation(self):
        """fit on raw examples (tokenized in the tf.data pipeline) with raw
        validation_data; evaluate reports exactly the objective's parts; compile(loss=...)
        and compile(metrics=...) are refused."""
        model = self.model()
        raw = RAW[model.input_kind]
        model.compile(optimizer=keras.optimizers.AdamW(1e-3))
        history = model.fit(raw, batch_size=8, epochs=1, steps_per_epoch=2,
                            validation_data=raw[:16], verbose=0)
        assert np.isfinite(history.history["val_loss"][0])
        result = model.evaluate(raw[:16], batch_size=8, verbose=0, return_dict=True)
        assert set(result) == set(model.metric_names), result
        assert all(np.isfinite(v) for v in result.values())
        with pytest.raises(ConfigError, match="loss="):
            model.compile(optimizer="adam", loss="mse")
        with pytest.raises(ConfigError, match="metrics="):
            model.compile(optimizer="adam", metrics=["mae"])

    def test_keras_file_round_trip(self, tmp_path):
        """model.save(".keras") then keras.saving.load_model: the same class and the same
        embeddings (the fresh-process version, with the optimizer state, is
        tests/test_keras_native.py)."""
        model = self.model()
        model.compile(optimizer=keras.optimizers.AdamW(1e-3))
        path = str(tmp_path / "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        assert type(loaded) is type(model)
        np.testing.assert_allclose(loaded.encode(PROBE), model.encode(PROBE), atol=1e-6)

    def test_export_serves_what_encode_gives(self, tmp_path):
        """`model.export` (Keras-native) writes a SavedModel (export pooling and head) that
        embeds as `encode` does."""
        model = self.model()
        path = model.export(str(tmp_path / "export"), verbose=False)
        assert path == str(tmp_path / "export" / "1")
        served = SavedModelEncoder(path).encode(PROBE)
        np.testing.assert_allclose(served, model.encode(PROBE), atol=1e-5)
