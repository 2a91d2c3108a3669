"""ConSERT joint (NLI CE + alpha * NT-Xent), the reference's BERT-base joint run.

    python -m tfsent.train --method=consert_joint --config=configs/consert_joint.py \
        --config.train_data=PATH/TO/NLI --config.eval_data_dir=PATH/TO/SentEval/data/downstream

Every field follows the authors' script `scripts/sup-consert-joint-base.sh` of
github.com/yym6472/ConSERT ("joint" below), its `main.py` defaults ("main.py") and the
sentence-transformers `fit` it calls ("fit"), or the paper (consert.txt):
L = L_ce + 0.15 * [NT-Xent(premises' views) + NT-Xent(hypotheses' views)].
Stage 2 of joint-unsup:
    python -m tfsent.train --method=consert --config=configs/consert_unsup.py \
        --config.encoder=RUN1/encoder --config.train_data=PATH/TO/target_texts.txt
(sup-unsup: the same with --method=consert_sup in stage 1.)

Not reproduced: joint runs under apex AMP O1 (fp16; here `mixed_precision` is left to the
user: mixed_float16 on a GPU); fit's AdamW uses eps 1e-6 without bias correction and no
weight decay on biases and LayerNorm (Keras AdamW here: eps 1e-7, bias-corrected, decay on
every variable).
"""


def get_config():
    return {
        "method": "consert_joint",
        "encoder": "bert_base_en_uncased",   # joint: --model_name_or_path ./bert-base-uncased/
        "train_data": "data/nli",            # main.py: AllNLI train (SNLI + MultiNLI), here
                                             # as one SentEval s1/s2/labels directory
        "pooling": "mean",                   # main.py: Pooling(mean tokens); dev on it too
        "export_pooling": "last2_avg",       # paper 4.1 "Evaluation": last two layers averaged
        "max_seq_length": 64,                # joint: --max_seq_length 64
        "batch_size": 96,                    # joint: --batch_size 96
        "epochs": 1.0,                       # main.py: --num_epochs default 1
        "steps": 0,
        "learning_rate": 2e-5,               # main.py: --learning_rate default 2e-5 (joint
                                             # does not set it; 5e-7 is the unsup scripts')
        "warmup_ratio": 0.1,                 # main.py: warmup 10% of the training steps
        "lr_schedule": "linear",             # fit: scheduler WarmupLinear
        "clip_norm": 1.0,                    # fit: max_grad_norm 1
        "weight_decay": 0.01,                # fit: weight_decay 0.01
        "consert_alpha": 0.15,               # joint: --cl_rate 0.15
        "temperature": 0.1,                  # joint: --temperature 0.1
        "direction_reduction": "sum",        # AdvCLSoftmaxLoss: loss_a + loss_b
        "view1_augmentation": "none",        # joint: --data_augmentation_strategy cutoff, whose
                                             # view 1 is rep_a, the un-augmented CE pass
        "view2_augmentation": "token_cutoff",  # joint: --cutoff_direction row
        "token_cutoff_rate": 0.1,            # joint: --cutoff_rate 0.1
        "ce_max_feature": True,              # joint: --concatenation_sent_max_square
        "encoder_dropout": None,             # joint: no --no_dropout, BERT's 0.1 stays on
        "eval_data": "stsb",                 # main.py: STS-B dev, the best checkpoint kept
        "eval_every": 200,                   # joint: --evaluation_steps 200
        "seed": 1,                           # joint: --seed 1
        "test_tasks": "sts",
    }
