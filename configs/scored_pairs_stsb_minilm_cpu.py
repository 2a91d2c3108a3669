"""Scored pairs on STS-B train from all-MiniLM-L6-v2, on a CPU (docs/methods.md,
"Scored pairs"; the measurement is in docs/results.md).

One epoch of the 5,749 STS-B train pairs at batch 32 (179 steps), lr 2e-5 with 10% warmup,
selected on STS-B dev every 60 steps; STS-B test and SICK-R reported after training.
Choose the loss with --config.scored_loss=cosent|angle|cosine:

    python -m tfsent.train --config=configs/scored_pairs_stsb_minilm_cpu.py \
        --config.eval_data_dir=../shared/data --config.scored_loss=angle
"""


def get_config():
    return {
        "method": "scored_pairs",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "stsb",
        "eval_data": "stsb",
        "eval_data_dir": "../shared/data",
        "scored_loss": "cosent",
        "scored_scale": 20.0,
        "score_min": 0.0,
        "score_max": 5.0,
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,
        "batch_size": 32,
        "max_seq_length": 64,
        "steps": 0,
        "epochs": 1.0,
        "eval_every": 60,
        "test_tasks": "STSBenchmark,SICKRelatedness",
    }
