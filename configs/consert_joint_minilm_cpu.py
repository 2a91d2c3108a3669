"""ConSERT joint (L_ce + 0.15 L_con) from minilm-l6 on a CPU, on SNLI.

SNLI dev is the training data (the only SNLI split offline besides test, which is held out
for NLI accuracy). lr 2e-5 instead of the paper's 5e-7: 150 steps must also train a fresh
Dense(3) cross-entropy head. Views as the paper's joint recipe (feature_cutoff 0.2 / shuffle,
encoder dropout off); mean pooling (minilm-l6 is a mean-pooled model); batch 32 for CPU time.
"""


def get_config():
    return {
        "method": "consert_joint",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "../shared/data/SNLI",
        "train_split": "dev",
        "nli_eval_split": "test",
        "max_seq_length": 32,
        "batch_size": 32,
        "steps": 150,
        "eval_every": 50,
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,
        "consert_alpha": 0.15,
        "view1_augmentation": "feature_cutoff",
        "view2_augmentation": "shuffle",
        "feature_cutoff_rate": 0.2,
        "temperature": 0.1,
        "direction_reduction": "sum",
        "encoder_dropout": 0.0,
        "eval_data": "stsb",
        "eval_data_dir": "../shared/data",
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness",
    }
