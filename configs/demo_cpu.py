"""The no-flag demo: minilm-l6 on the demo corpus shipped in the package, a few CPU minutes.

These fields equal the built-in run defaults (`python -m tfsent.train --method=NAME` with no
--config); the file exists to be copied and edited. Everything else (learning rate, steps,
batch size, evaluation schedule, pooling, temperature, training data) is left to each method's demo
defaults (`tfsent/methods/__init__.py`, chosen so the demo's export keeps minilm-l6's STS-B
and SICK-R test scores; docs/results.md, "No-flag runs"): setting it here would override those for
every method.
"""


def get_config():
    return {
        "encoder": "minilm-l6",
        "eval_data": "demo",
        "max_seq_length": 32,
    }
