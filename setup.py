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
    install_requires=[
        "tensorflow==2.21.*",
        "tensorflow-text==2.21.*",
        "keras>=3.10,<3.16",
        "keras-hub>=0.32,<0.33",
        "tensorflow-datasets",
        "scipy",
        "numpy",
        "absl-py",
        "tensorboard",
        "safetensors",
    ],
    extras_require={
        # matplotlib: the plot tests (tfsent[plots]); hypothesis: tests/reliability fuzzing;
        # tokenizers, sentencepiece, transformers (no torch): tiny Hugging Face checkpoints of
        # each encoder family and the tokenizer parity references (tests/hf_checkpoints.py);
        # tokenizers also runs the tokenizer.json of tfsent's Hugging Face exports;
        # faiss-cpu: the exact-search reference of the search exports and their benchmark
        "test": ["pytest", "matplotlib", "hypothesis", "tokenizers", "sentencepiece",
                 "transformers", "faiss-cpu>=1.8,<2"],
        "plots": ["matplotlib"],
    },
)
