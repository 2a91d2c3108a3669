"""The no-flag demo: minilm-l6 on the demo corpus shipped in the package, a few CPU minutes.

These are also the built-in run defaults (`python -m tfsent.train --method=NAME` with no
--config); the file exists to be copied and edited. The learning rate and the other
method-specific fields are left to each method's demo defaults (`tfsent/methods/__init__.py`,
chosen so the demo's export keeps minilm-l6's STS-B and SICK-R test scores; README,
"No-flag runs"): setting them here would override those for every method.
"""


def get_config():
    return {
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "demo",
        "eval_data": "demo",
        "max_seq_length": 32,
        "batch_size": 32,
        "steps": 150,
        "eval_every": 50,
    }
