"""Exports an encoder from the command line (the library: `tfsent.saved_model` writes
SavedModels, `tfsent.publish` the other ecosystems' formats).

    python -m tfsent.export --model=NAME_OR_DIR --pooling=mean --export_dir=DIR [--jit_compile]
        [--truncate_dim=D] [--quantize=int8,binary --calibration_file=SENTENCES.txt]
    python -m tfsent.export --model=... --format=onnx|litert --export_dir=NEW_DIR
        [--quantize=int8]
    python -m tfsent.export --model=... --format=sentence_transformers|huggingface|keras_hub
        --export_dir=NEW_DIR [--normalize]

--format=tf_saved_model (the default; `saved_model` is its older name), onnx and litert go
through the registry `tfsent.formats.FORMATS`; the others through `tfsent.publish`.

Every flag is checked before the model is loaded; a bad flag or input prints `error: ...`
on stderr and exits with status 2. The SavedModel layout and signatures are described in
`tfsent.saved_model`.
"""

import os

from absl import app, flags, logging

from tfsent import cli, formats, publish, quantize
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError
from tfsent.matryoshka import check_dims
# The library names this command is built on, importable from here as before.
from tfsent.saved_model import METADATA_FILE, export_encoder, list_versions, tf_variables  # noqa: F401
from tfsent.serving import SavedModelEncoder, resolve_savedmodel_dir  # noqa: F401

# tfsent.publish's formats (its FORMATS also lists saved_model, the registry's alias).
PUBLISH_FORMATS = tuple(f for f in publish.FORMATS if f not in formats.ALIASES)


def main(argv):
    """CLI entry point: load an encoder and export it in --format (a bad flag or input:
    `error: ...` on stderr, exit status 2)."""
    print(cli.run_command(_export_from_flags, argv))


def _export_from_flags():
    """Checks the flags, loads --model and writes the export; returns its path."""
    FLAGS = flags.FLAGS
    # Refuse what can be refused before loading the model.
    fmt = _check_format_flag(FLAGS.format)
    entry = formats.FORMATS.get(fmt)
    quantize_modes = tuple(n.strip() for n in FLAGS.quantize.split(",") if n.strip())
    if FLAGS.with_onnx and fmt != "sentence_transformers":
        raise ConfigError("--with_onnx adds ONNX files to --format=sentence_transformers "
                          "(for ONNX Runtime alone use --format=onnx)")
    if entry is None:  # a tfsent.publish format
        for flag in ("jit_compile", "truncate_dim", "quantize"):
            if getattr(FLAGS, flag):
                raise ConfigError(f"--{flag} applies to --format=tf_saved_model only")
        publish.check_export_target(FLAGS.export_dir)
        if fmt == "sentence_transformers":
            publish.check_sentence_transformers_pooling(FLAGS.pooling)
        if FLAGS.with_onnx:
            publish.check_onnx_files(fmt, FLAGS.pooling)
        encoder = _load_encoder()
        path = publish.export_encoder_as(encoder, FLAGS.export_dir, fmt,
                                         pooling=FLAGS.pooling, normalize=FLAGS.normalize,
                                         metadata={"model": FLAGS.model},
                                         query_prompt=FLAGS.query_prompt,
                                         document_prompt=FLAGS.document_prompt,
                                         onnx=FLAGS.with_onnx)
    elif entry.name == "tf_saved_model":
        path = _export_saved_model(quantize_modes)
    else:
        for flag in ("jit_compile", "truncate_dim", "calibration_file"):
            if getattr(FLAGS, flag):
                raise ConfigError(f"--{flag} applies to --format=tf_saved_model only")
        formats.check_export(fmt, FLAGS.export_dir, quantize_modes)
        writer = entry.load_writer()  # a missing writer module is named before the load
        options = {"pooling": FLAGS.pooling, "metadata": {"model": FLAGS.model}}
        for name in ("query_prompt", "document_prompt", "normalize"):
            if getattr(FLAGS, name):
                options[name] = getattr(FLAGS, name)
        if quantize_modes:
            options[entry.quantize_kwarg] = quantize_modes
        path = writer(_load_encoder(), FLAGS.export_dir, **options)
    logging.info("exported %s (pooling %s) as %s to %s", FLAGS.model, FLAGS.pooling,
                 fmt, path)
    return path


def _check_format_flag(name):
    """--format's canonical name (a registry format, an alias of one, or a tfsent.publish
    format); ConfigError listing the valid names otherwise."""
    if name in PUBLISH_FORMATS:
        return name
    if name in formats.FORMATS or name in formats.ALIASES:
        return formats.get_format(name).name
    raise ConfigError(f"--format={name}: unknown format; valid: "
                      f"{', '.join([*formats.FORMATS, *PUBLISH_FORMATS])} "
                      f"({', '.join(f'{a} = {b}' for a, b in formats.ALIASES.items())})")


def _load_encoder():
    """The --model encoder with --pooling and --max_seq_length."""
    FLAGS = flags.FLAGS
    return load_encoder(FLAGS.model, pooling=FLAGS.pooling, max_seq_length=FLAGS.max_seq_length)


def _export_saved_model(quantize_modes):
    """--format=tf_saved_model: the flag checks, then a new version under --export_dir."""
    FLAGS = flags.FLAGS
    if FLAGS.normalize:
        raise ConfigError("--normalize applies to the other formats: a SavedModel serves "
                          "both `embedding` and `embedding_normalized`")
    quantize_outputs = quantize.parse_quantize(quantize_modes)
    formats.check_export("tf_saved_model", FLAGS.export_dir, quantize_outputs)
    calibration = None
    if FLAGS.calibration_file and "int8" not in quantize_outputs:
        raise ConfigError("--calibration_file sets the int8 ranges: use it with "
                          "--quantize=int8")
    if "int8" in quantize_outputs:
        if not FLAGS.calibration_file:
            raise ConfigError("--quantize=int8 needs --calibration_file (sentences, one per "
                              "line, like the ones the model will serve)")
        calibration = quantize.read_calibration_sentences(FLAGS.calibration_file)
    if FLAGS.truncate_dim is not None and FLAGS.truncate_dim < 1:
        raise ConfigError(f"--truncate_dim must be >= 1, got {FLAGS.truncate_dim}")
    encoder = _load_encoder()
    metadata = {"model": FLAGS.model}
    if calibration is not None:
        metadata["int8_calibration_file"] = os.path.abspath(FLAGS.calibration_file)
    if FLAGS.truncate_dim is not None:
        check_dims([FLAGS.truncate_dim], encoder.hidden_dim, "--truncate_dim")
    return export_encoder(encoder, FLAGS.export_dir, pooling=FLAGS.pooling,
                          metadata=metadata, jit_compile=FLAGS.jit_compile,
                          truncate_dim=FLAGS.truncate_dim, quantize_outputs=quantize_outputs,
                          calibration_sentences=calibration, query_prompt=FLAGS.query_prompt,
                          document_prompt=FLAGS.document_prompt)


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    flags.DEFINE_string("model", "minilm-l6", "Encoder: preset name, checkpoint dir or minilm-l6.")
    flags.DEFINE_string("pooling", "mean", "Pooling carried by the export.")
    flags.DEFINE_integer("max_seq_length", 256, "Tokenizer truncation length.")
    flags.DEFINE_string("format", "tf_saved_model", "tf_saved_model (alias saved_model): "
                        "versioned SavedModels for TF Serving under --export_dir; onnx / "
                        "litert (tfsent.formats), sentence_transformers / huggingface / "
                        "keras_hub (tfsent.publish): a new directory --export_dir.")
    flags.DEFINE_string("export_dir", None, "Directory of versioned SavedModels, or the new "
                        "directory of the other formats.")
    flags.DEFINE_bool("normalize", False, "L2-normalise the embedding (sentence_transformers: "
                      "a Normalize module; keras_hub: the TextEmbedder's normalize).")
    flags.DEFINE_bool("with_onnx", False, "sentence_transformers: also write onnx/model.onnx "
                      "and onnx/model_qint8_avx512_vnni.onnx for its ONNX backend (the "
                      "tfsent[onnx] extra; ~2x the checkpoint's size).")
    flags.DEFINE_bool("jit_compile", False, "Serve under XLA on bucketed batch shapes (TF "
                      "Serving on CPU then needs --xla_cpu_compilation_enabled=true).")
    flags.DEFINE_integer("truncate_dim", None, "Serve only the first D dimensions of the "
                         "embedding (a Matryoshka-trained model), truncated before "
                         "normalisation.")
    flags.DEFINE_string("quantize", "", "tf_saved_model: also serve quantized embeddings: "
                        "int8, binary or int8,binary (outputs embedding_int8 / "
                        "embedding_binary); onnx / litert: int8 weights.")
    flags.DEFINE_string("calibration_file", None, "Sentences (one per line) whose embeddings "
                        "set the int8 ranges; required with --quantize=int8.")
    flags.DEFINE_string("query_prompt", "", "Text put before each query: the SavedModel's "
                        "encode_query signature, sentence-transformers' prompts['query'].")
    flags.DEFINE_string("document_prompt", "", "Text put before each document: "
                        "encode_document, sentence-transformers' prompts['document'].")
    flags.mark_flag_as_required("export_dir")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
