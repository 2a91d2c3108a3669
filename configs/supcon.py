"""Supervised-contrastive SBERT, the paper's recipe (supcon_sbert.txt).

BERT L-8 H-512 via a keras-hub preset (or a Hugging Face checkpoint directory of
google/bert_uncased_L-8_H-512_A-8), SNLI train, 1 epoch. SCL: one anchor per premise of the
batch (its entailment row's premise embedding), positives its entailed hypotheses, negatives
every other hypothesis of the batch; premise-grouped batches keep a premise's rows together.
"""


def get_config():
    return {
        "method": "supcon",
        "encoder": "bert_medium_en_uncased",  # L-8 H-512 (keras-hub's name for it)
        "pooling": "mean_no_cls",
        "train_data": "tfds:snli",
        "max_seq_length": 128,
        "batch_size": 64,
        "steps": 0,
        "epochs": 1.0,
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,                # 10% warmup
        "temperature": 1.0,                 # tau
        "scl_weight": 0.3,                  # lambda (0.3 best STS, 0.1 best transfer)
        "max_positives": 0,                 # N+ = all (3: own + 2 random others)
        "max_negatives": 0,                 # N- = all (best in the paper's Tables 2-3)
        "similarity": "dot",
        "eval_data": "stsb",
        "eval_every": 500,
        "test_tasks": "sts,transfer",
    }
