"""ConSERT unsupervised, the paper's BERT-base recipe (Yan et al., 2021).

    python -m tfsent.train --method=consert --config=configs/consert_unsup.py \
        --config.train_data=PATH/TO/unlabeled_sentences.txt \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
Needs internet for the preset. The paper trains on the unlabeled texts of the STS tasks;
any one-sentence-per-line file works. View 1 feature cutoff 0.2, view 2 token shuffle (its
best pair, Figure 5), encoder dropout off, NT-Xent tau 0.1 (sum of the two directions, as
the reference code), Adam lr 5e-7, 10% warmup, batch 96, max_len 64, STS-B dev every 200
steps. Training/dev pooling `mean`; the reported numbers use `last2_avg` (export_pooling).

Two-stage settings (sup-unsup, joint-unsup): train stage 1 with configs/consert_joint.py
(or --method=consert_sup), then run this recipe with --config.encoder=RUN1/encoder.

Loss scale: the reference (scripts/unsup-consert-base.sh, AdvCLSoftmaxLoss) minimises
0.15 x L_con (its --cl_rate 0.15 multiplies the contrastive term in every mode); tfsent's
unsupervised objective is L_con itself, so logged losses and gradient norms here are
1/0.15 = 6.7 times the reference's. Adam's update does not depend on a constant loss
factor (up to its epsilon), so the only other effect would be on gradient clipping: the
reference clips the gradient of 0.15 L_con at norm 1 (sentence-transformers fit,
max_grad_norm 1), which is clipping the gradient of L_con at 1 / 0.15; hence clip_norm 6.67.
"""


def get_config():
    return {
        "method": "consert",
        "encoder": "bert_base_en_uncased",
        "pooling": "mean",
        "export_pooling": "last2_avg",
        "max_seq_length": 64,
        "batch_size": 96,
        "epochs": 10.0,                     # reference: --num_epochs 10 (it also stops after
                                            # 10 evaluations without gain; here the best
                                            # dev checkpoint is kept, no early stop)
        "steps": 0,
        "learning_rate": 5e-7,
        "warmup_ratio": 0.1,
        "clip_norm": 6.67,                  # reference: 1.0 on 0.15 x L_con (see above)
        "weight_decay": 0.01,               # reference fit: weight_decay 0.01
        "view1_augmentation": "feature_cutoff",
        "view2_augmentation": "shuffle",
        "feature_cutoff_rate": 0.2,
        "token_cutoff_rate": 0.15,
        "aug_dropout_rate": 0.2,
        "temperature": 0.1,
        "direction_reduction": "sum",
        "encoder_dropout": 0.0,
        "eval_data": "stsb",
        "eval_every": 200,
        "test_tasks": "sts",
    }
