"""SCD, the reference BERT-base recipe (Klein and Nabi, 2022; SAP reference code).

    python -m tfsent.train --method=scd --config=configs/scd.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
Needs internet for the preset and the data (tools/download_data.py).

Coefficients in the reference code's form L = alpha L_S + beta L_C with L_S divided by tau
(the paper writes L_S + alpha L_C with alpha 0.005, lambda 0.013). The run is prone to a
late collapse (STS falls from ~76 to ~59): the best checkpoint on SICK-R dev is kept, and
the divergence guard stops the run once dev Spearman is `divergence_drop` points below it.
"""


def get_config():
    return {
        "method": "scd",
        "encoder": "bert_base_en_uncased",
        "pooling": "cls_before_pooler",     # raw [CLS], at training and export
        "train_data": "data/wiki1m_for_simcse.txt",
        "max_seq_length": 32,
        "batch_size": 192,
        "epochs": 1.0,
        "steps": 0,
        "learning_rate": 3e-5,
        "dropout_rate_a": 0.05,             # r_A (RoBERTa: 0.065)
        "dropout_rate_b": 0.15,             # r_B (RoBERTa: 0.24)
        "scd_alpha": 1.0,                   # weight of L_S
        "scd_beta": 0.005225,               # weight of L_C
        "scd_lambda": 0.012,                # off-diagonal weight in L_C
        "temperature": 0.05,                # tau of L_S
        "projector_width": 4096,            # Linear(768->4096)-BN-ReLU-Linear-BN-ReLU-Linear
        "eval_data": "sickr",               # SICK-R dev, as in the reference
        "eval_every": 250,
        "divergence_drop": 5.0,
        "test_tasks": "sts",
    }
