"""SupCon-SBERT from minilm-l6 on a CPU: SNLI dev as training data (the only SNLI split
offline besides test, which is held out for NLI accuracy). Run twice, with
--config.scl_weight=0.0 (the SBERT baseline) and 0.3. SCL as configs/supcon.py: one anchor
per premise, all positives and negatives."""


def get_config():
    return {
        "method": "supcon",
        "encoder": "minilm-l6",
        "pooling": "mean_no_cls",
        "train_data": "../shared/data/SNLI",
        "train_split": "dev",
        "eval_data_dir": "../shared/data",
        "max_seq_length": 32,              # SNLI sentences are short (premises ~14 wordpieces)
        "batch_size": 64,
        "steps": 150,
        "eval_every": 50,
        "first_eval_step": 0,              # select among steps 50/100/150 only: docs/results.md
                                           # compares objectives, not 10 warmup steps
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,
        "temperature": 1.0,
        "scl_weight": 0.3,
        "eval_data": "stsb",
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness,MR,CR,TREC,MRPC",
    }
