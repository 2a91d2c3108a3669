"""Exports an encoder from the command line, in any format of the registry
`tfsent.formats.FORMATS` (the library: `tfsent.formats.export`).

    python -m tfsent.export --model=NAME_OR_DIR --export_dir=DIR [--jit_compile]
        [--truncate_dim=D] [--quantize=int8,binary --calibration_file=SENTENCES.txt]
    python -m tfsent.export --model=... --format=onnx|litert --export_dir=NEW_DIR
        [--quantize=int8]
    python -m tfsent.export --model=... --format=sentence_transformers|huggingface|keras_hub
        --export_dir=NEW_DIR [--normalize] [--with_onnx]
    python -m tfsent.export --model=CROSS_ENCODER.keras|CROSS_ENCODER_RUN_DIR
        --format=cross_encoder_hf --export_dir=NEW_DIR [--with_onnx]
        (or --format=cross_encoder: a SavedModel)

--format=tf_saved_model (the default; `saved_model` is its older name) adds the next
SavedModel version under --export_dir; the other formats write the new directory
--export_dir. --pooling and --max_seq_length default to the model's own.

Every flag is checked before the model is loaded (`tfsent.formats.check_export`: the
format, its quantize modes, the target, its optional dependency, the options it takes);
a bad flag or input prints `error: ...` on stderr and exits with status 2. The SavedModel
layout and signatures: `tfsent.formats.saved_model`.
"""

import os

from absl import flags, logging

from tfsent import cli, formats
from tfsent.encoders import check_pooling, load_encoder
from tfsent.errors import ConfigError
from tfsent.formats import quantize
from tfsent.formats.model_paths import check_bi_encoder, is_run_dir
from tfsent.matryoshka import check_dims

# The flags whose writer option has another name.
OPTION_FLAGS = {"onnx": "--with_onnx", "calibration_sentences": "--calibration_file"}


def main(argv):
    """CLI entry point: load an encoder and export it in --format (a bad flag or input:
    `error: ...` on stderr, exit status 2)."""
    path = cli.run_command(_export_from_flags, argv)
    print(path)
    cli.print_next_steps(formats.next_step_lines(flags.FLAGS.format, path))


def _export_from_flags():
    """Checks the flags, loads --model and writes the export; returns its path."""
    FLAGS = flags.FLAGS
    quantize_modes = formats.quantize_tuple(FLAGS.quantize)
    options = {"pooling": FLAGS.pooling, "normalize": FLAGS.normalize,
               "onnx": FLAGS.with_onnx, "jit_compile": FLAGS.jit_compile,
               "truncate_dim": FLAGS.truncate_dim, "query_prompt": FLAGS.query_prompt,
               "document_prompt": FLAGS.document_prompt,
               "calibration_sentences": FLAGS.calibration_file}
    entry = formats.check_export(FLAGS.format, FLAGS.export_dir, quantize_modes, options,
                                 option_names=OPTION_FLAGS)
    if FLAGS.pooling is not None:
        if entry.name == "sentence_transformers":  # names what the format can express
            formats.check_sentence_transformers_pooling(FLAGS.pooling)
        check_pooling(FLAGS.pooling)
    if FLAGS.truncate_dim is not None and FLAGS.truncate_dim < 0:
        raise ConfigError(f"--truncate_dim must be >= 0, got {FLAGS.truncate_dim}")
    metadata = {"model": FLAGS.model}
    if FLAGS.calibration_file and "int8" not in quantize_modes:
        raise ConfigError("--calibration_file sets the int8 ranges: use it with "
                          "--quantize=int8")
    if FLAGS.calibration_file:
        options["calibration_sentences"] = quantize.read_calibration_sentences(
            FLAGS.calibration_file)
        metadata["int8_calibration_file"] = os.path.abspath(FLAGS.calibration_file)
    elif "int8" in quantize_modes and "calibration_sentences" in entry.options():
        raise ConfigError("--quantize=int8 needs --calibration_file (sentences, one per "
                          "line, like the ones the model will serve)")
    if not entry.scores_pairs:
        check_bi_encoder(FLAGS.model, "--model", hint=" (a cross-encoder exports as "
                         "--format=cross_encoder or cross_encoder_hf from its .keras file "
                         "or its training run's folder)")
    if entry.scores_pairs:  # a CrossEncoder's .keras file (formats.export loads it) or
        # a cross_encoder training run's folder (its exported model, rebuilt)
        options["max_seq_length"] = FLAGS.max_seq_length
        model = FLAGS.model
        if is_run_dir(model):
            from tfsent.training import load_run_cross_encoder  # noqa: PLC0415 (heavy)

            model = load_run_cross_encoder(model)
        return formats.export(model, FLAGS.export_dir, format=entry.name,
                              metadata=metadata, **options)
    encoder = load_encoder(FLAGS.model, pooling=FLAGS.pooling,
                           max_seq_length=FLAGS.max_seq_length)
    if FLAGS.truncate_dim:  # 0: the whole embedding
        check_dims([FLAGS.truncate_dim], encoder.hidden_dim, "--truncate_dim")
    path = formats.export(encoder, FLAGS.export_dir, format=entry.name,
                          quantize=quantize_modes, metadata=metadata, **options)
    logging.info("exported %s (pooling %s) as %s to %s", FLAGS.model, encoder.pooling,
                 entry.name, path)
    return path


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    cli.define_model_flags()
    flags.DEFINE_string("format", "tf_saved_model", "The output format (alias saved_model "
                        f"= tf_saved_model): {formats.help_text()}.")
    flags.DEFINE_string("export_dir", None, "Directory of versioned SavedModels, or the new "
                        "directory of the other formats.")
    flags.DEFINE_bool("normalize", None, "L2-normalise the embedding (sentence_transformers: "
                      "a Normalize module, by default when the model normalises (its folder "
                      "had one); keras_hub: the TextEmbedder's normalize).")
    flags.DEFINE_bool("with_onnx", False, "sentence_transformers, cross_encoder_hf: also "
                      "write onnx/model.onnx and onnx/model_qint8_avx512_vnni.onnx for its "
                      "ONNX backend (the tfsent[onnx] extra; ~2x the checkpoint's size).")
    flags.DEFINE_bool("jit_compile", False, "Serve under XLA on bucketed batch shapes (TF "
                      "Serving on CPU then needs --xla_cpu_compilation_enabled=true).")
    flags.DEFINE_integer("truncate_dim", None, "Serve only the first D dimensions of the "
                         "embedding (a Matryoshka-trained model), truncated before "
                         "normalisation (default: the model's own truncate_dim, a "
                         "sentence-transformers folder's; 0: all dimensions).")
    flags.DEFINE_string("quantize", "", "tf_saved_model: also serve quantized embeddings: "
                        "int8, binary or int8,binary (outputs embedding_int8 / "
                        "embedding_binary); onnx / litert: int8 weights.")
    flags.DEFINE_string("calibration_file", None, "Sentences (one per line) whose embeddings "
                        "set the int8 ranges; required with --quantize=int8.")
    flags.mark_flag_as_required("export_dir")


if __name__ == "__main__":
    _define_flags()
    cli.start(main)
