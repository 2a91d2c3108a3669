"""SCD from minilm-l6 on a CPU.

Pooling `mean`, not the paper's `cls_before_pooler`: minilm-l6 (all-MiniLM-L6-v2) is a
sentence encoder trained with mean pooling, so its [CLS] state was never trained to
summarise the sentence; starting SCD from [CLS] would throw that training away and begin
far below the mean-pooled model (the same choice as the SimCSE and CMLM-CSE CPU recipes).
The projector is 1024 wide instead of 4096 (a 4096x4096 cross-correlation per step is
slow on a CPU); the loss coefficients, rates and tau are the reference's. Dev selection on
SICK-R as in the reference.
"""


def get_config():
    return {
        "method": "scd",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "../shared/data/wiki/wiki1m_prefix.txt",
        "max_seq_length": 32,
        "batch_size": 64,
        "steps": 150,
        "eval_every": 50,
        "learning_rate": 3e-5,
        "dropout_rate_a": 0.05,
        "dropout_rate_b": 0.15,
        "scd_alpha": 1.0,
        "scd_beta": 0.005225,
        "scd_lambda": 0.012,
        "temperature": 0.05,
        "projector_width": 1024,
        "eval_data": "sickr",
        "eval_data_dir": "../shared/data",
        "divergence_drop": 5.0,
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness",
        "report_geometry": True,            # the paper's Figure 2 analysis
    }
