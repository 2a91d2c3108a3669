"""Installs tfsent."""

from setuptools import find_packages, setup

setup(
    name="tfsent",
    version="0.1.0",
    description="Contrastive sentence-embedding objectives (SimCSE, CMLM-CSE, ConSERT, SCD, "
                "SupCon-SBERT, CLSR) as Keras 3 / TensorFlow models",
    python_requires=">=3.10",
    packages=find_packages(include=["tfsent", "tfsent.*"]),
    package_data={"tfsent": ["data/demo/*.txt", "data/demo/*.tsv"]},
    # Every range starts at the version CI installs and tests today (.ci/run: a fresh venv,
    # `pip install -e ".[test]"`) and stops before the next release that may break us: the
    # next minor for keras (tfsent uses private Keras members; keras-hub 0.32 itself needs
    # keras>=3.15), tensorflow/tensorboard (one TF release) and 0.x packages, the next major
    # otherwise. Widen a range only after CI has run on the new versions.
    install_requires=[
        "tensorflow==2.21.*",
        "tensorflow-text==2.21.*",
        "keras>=3.15,<3.16",
        "keras-hub>=0.32,<0.33",
        "numpy>=2.4,<3",
        "scipy>=1.17,<2",
        "absl-py>=2.5,<3",
        "tensorboard==2.21.*",
        "safetensors>=0.8,<0.9",
    ],
    extras_require={
        # tensorflow-datasets: only the `tfds:NAME` training sources (tfsent/data/readers.py)
        "tfds": ["tensorflow-datasets>=4.9.10,<5"],
        # matplotlib: the plot tests (tfsent[plots]); hypothesis: tests/reliability fuzzing;
        # tokenizers, sentencepiece, transformers (no torch): tiny Hugging Face checkpoints of
        # each encoder family and the tokenizer parity references (tests/hf_checkpoints.py);
        # tokenizers also runs the tokenizer.json of tfsent's Hugging Face exports;
        # pytrec-eval-terrier (trec_eval) and faiss-cpu: the references of the retrieval
        # measures and of the exact search (tests/test_retrieval.py, test_search_index.py);
        # tensorflow-serving-api: TF Serving's PredictionLog proto, which parses the warm-up
        # requests of every SavedModel export (tests/test_tf_serving_files.py);
        # ai-edge-litert, onnx, onnxruntime: the LiteRT and ONNX export tests;
        # pytest-xdist: the suite runs on 2 worker processes (README, "Test")
        "test": ["pytest>=9.2,<10", "pytest-xdist>=3.8,<4", "matplotlib>=3.11,<4",
                 "hypothesis>=6.170,<7",
                 "tokenizers>=0.23,<0.24", "sentencepiece>=0.2.3,<0.3",
                 "transformers>=5.24,<6", "pytrec-eval-terrier>=0.5.11,<0.6",
                 "faiss-cpu>=1.15,<2", "tensorflow-serving-api==2.21.*",
                 "ai-edge-litert>=2.3,<3", "onnx>=1.23,<1.24", "onnxruntime>=1.32,<1.33"],
        "plots": ["matplotlib>=3.11,<4"],
        # ai-edge-litert: the LiteRT export's Interpreter (tfsent.formats.litert checks the
        # converted model with it; users run the .tflite with it); tokenizers: the
        # export's tokenizer.json, which docs/export.md's snippet tokenizes with
        "litert": ["ai-edge-litert>=2.3,<3", "tokenizers>=0.23,<0.24"],
        # onnx + onnxruntime: the onnx export format (tfsent/formats/onnx.py), tested with
        # onnx 1.23.2 and onnxruntime 1.32.0 (its com.microsoft fused CPU ops); tokenizers
        # as for litert
        "onnx": ["onnx>=1.23,<1.24", "onnxruntime>=1.32,<1.33", "tokenizers>=0.23,<0.24"],
    },
)
