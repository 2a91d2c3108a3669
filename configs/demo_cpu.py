"""The no-flag demo: minilm-l6 on the demo corpus shipped in the package, a few CPU minutes.

These are also the built-in defaults (`python -m tfsent.train --method=NAME` with no
--config); the file exists to be copied and edited.
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
        "learning_rate": 3e-5,
    }
