"""Contrastive and auxiliary losses as pure functions of tensors (no model inside).

All losses compute in float32 whatever the input dtype (mixed precision safe).
Notation: B batch, H hidden, tau temperature; z1, z2 two views of the same sentences.
"""

import tensorflow as tf


def _l2n(x):
    return tf.math.l2_normalize(tf.cast(x, tf.float32), axis=-1)


def cosine_matrix(a, b):
    """cos(a_i, b_j) for all i, j: (N, H) x (M, H) -> (N, M), float32."""
    return tf.matmul(_l2n(a), _l2n(b), transpose_b=True)


def info_nce(z1, z2, z3=None, temperature=0.05, hard_negative_weight=0.0):
    """SimCSE's InfoNCE, one direction (z1 anchors), mean over anchors.

    logits[i, j] = cos(z1_i, z2_j) / tau (B x B); with hard negatives z3 (B * N, H), N per
    anchor, anchor-major (row i * N + k is anchor i's k-th), the matrix gains
    cos(z1_i, z3_j) / tau for all B * N of them (B x B(1 + N)): every anchor's denominator
    has every hard negative of the batch. `hard_negative_weight` w adds w to the logits of
    each anchor's own hard negatives (SimCSE's `hard_negative_weight`, 0 in the paper).
    Labels are the diagonal. Returns a scalar float32.
    """
    logits = cosine_matrix(z1, z2) / temperature
    if z3 is not None:
        neg = cosine_matrix(z1, z3) / temperature
        if hard_negative_weight:
            per_anchor = tf.shape(z3)[0] // tf.shape(z1)[0]
            owner = tf.range(tf.shape(z3)[0]) // per_anchor
            own = tf.equal(owner[None, :], tf.range(tf.shape(z1)[0])[:, None])
            neg += hard_negative_weight * tf.cast(own, tf.float32)
        logits = tf.concat([logits, neg], axis=1)
    labels = tf.range(tf.shape(z1)[0])
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def nt_xent(z1, z2, temperature=0.1, direction_reduction="mean", valid=None):
    """Symmetric NT-Xent (SimCLR) over 2B vectors, self-similarity masked.

    For each of the 2B vectors the positive is its partner view and the candidates are
    the other 2B - 1 vectors. `direction_reduction="mean"` averages over all 2B anchors
    (SimCLR, CLSR); "sum" adds the two directions' means (ConSERT's reference code), i.e.
    twice the "mean" value.

    `valid` (B,), optional: 1 for real examples, 0 for padding slots (premise-grouped NLI
    batches repeat row 0 in them). Invalid rows are neither anchors nor candidates, and the
    means run over the valid anchors only; with every row valid (or valid=None) the
    result is the plain loss.
    """
    if direction_reduction not in ("mean", "sum"):
        raise ValueError(f"direction_reduction must be 'mean' or 'sum', got {direction_reduction!r}")
    z = tf.concat([z1, z2], axis=0)
    n = tf.shape(z1)[0]
    sim = cosine_matrix(z, z) / temperature
    excluded = tf.eye(2 * n)  # self-similarity
    if valid is not None:
        ok = tf.cast(tf.concat([valid, valid], axis=0), tf.float32) > 0
        excluded = tf.maximum(excluded, 1.0 - tf.cast(ok, tf.float32)[None, :])
    sim = sim - excluded * 1e9
    labels = tf.concat([tf.range(n, 2 * n), tf.range(0, n)], axis=0)
    per_anchor = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=sim)
    if valid is None:
        loss = tf.reduce_mean(per_anchor)
    else:
        w = tf.cast(ok, tf.float32)
        loss = tf.reduce_sum(per_anchor * w) / tf.maximum(tf.reduce_sum(w), 1.0)
    return 2.0 * loss if direction_reduction == "sum" else loss


def masked_lm_loss(logits, labels, weights):
    """Cross-entropy at masked positions only.

    Args:
        logits: (B, P, V) predictions at the P selected positions.
        labels: (B, P) original token ids.
        weights: (B, P) 1.0 where a position was really masked, 0.0 for padding slots.
    Returns:
        (sum of weighted CE, sum of weights, number of correct argmax predictions among
        masked positions); the caller divides (globally, under tf.distribute).
    """
    weights = tf.cast(weights, tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32))
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32),
                               tf.cast(labels, tf.int32)), tf.float32)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights), tf.reduce_sum(correct * weights)


def supervised_contrastive_loss(anchors, candidates, positive_mask, negative_mask,
                                temperature=1.0, similarity="dot"):
    """Supervised contrastive loss with explicit positive / negative sets per anchor.

    logit_ij = sim(anchor_i, candidate_j) / tau with sim the raw dot product (the
    SupCon-SBERT reference) or cosine. For anchor i with positives P(i) and negatives N(i):
        loss_i = -mean_{p in P(i)} [ logit_ip - log sum_{c in P(i) u N(i)} exp(logit_ic) ]
    Anchors without positives are left out; the result is the mean over the others
    (0 if there are none).

    Args:
        anchors: (A, H); candidates: (C, H).
        positive_mask, negative_mask: (A, C) booleans (disjoint).
        temperature: tau (1.0 in the paper).
        similarity: "dot" or "cosine".
    Returns:
        scalar float32.
    """
    if similarity == "cosine":
        logits = cosine_matrix(anchors, candidates)
    elif similarity == "dot":
        logits = tf.matmul(tf.cast(anchors, tf.float32), tf.cast(candidates, tf.float32),
                           transpose_b=True)
    else:
        raise ValueError(f"similarity must be 'dot' or 'cosine', got {similarity!r}")
    logits = logits / temperature
    pos = tf.cast(positive_mask, tf.float32)
    allowed = tf.logical_or(tf.cast(positive_mask, tf.bool), tf.cast(negative_mask, tf.bool))
    masked = tf.where(allowed, logits, -1e9)
    log_denominator = tf.reduce_logsumexp(masked, axis=1, keepdims=True)
    log_prob = logits - log_denominator
    n_pos = tf.reduce_sum(pos, axis=1)
    per_anchor = -tf.reduce_sum(log_prob * pos, axis=1) / tf.maximum(n_pos, 1.0)
    has_pos = tf.cast(n_pos > 0, tf.float32)
    return tf.reduce_sum(per_anchor * has_pos) / tf.maximum(tf.reduce_sum(has_pos), 1.0)


def supcon_sbert_masks(labels, premise_ids, valid, max_positives=0, max_negatives=0,
                       positive_keys=None, negative_keys=None, entailment=0):
    """SupCon-SBERT's anchors, positives and negatives over a batch of N NLI pairs.

    One anchor per premise (the paper: "we treat each premise as one single anchor
    sentence"): the premise embedding of the premise's first entailment row (the author's
    code anchors on entailment rows). Row a of the masks is that anchor; every other row is
    all False, so `supervised_contrastive_loss` leaves it out. Candidates are the N
    hypotheses:
      positives of a: the hypotheses entailed by the same premise (same `premise_ids`);
      negatives of a: every other valid hypothesis (its premise's neutral and
        contradiction hypotheses, and every hypothesis of other premises).
    `max_positives` N+ > 0 keeps the anchor's own entailed hypothesis (column a) plus up
    to N+ - 1 other positives with the largest `positive_keys`; `max_negatives` N- > 0
    keeps the N- negatives with the largest `negative_keys` (random keys: a random
    subset, as in the author's code). 0 keeps all.

    Args:
        labels, premise_ids, valid: (N,) NLI label ids, premise group ids, 1/0 validity.
        positive_keys, negative_keys: (N, N) floats, needed only with the caps.
        entailment: the label id of entailment.
    Returns:
        (positive_mask, negative_mask), (N, N) booleans (anchor rows x hypothesis columns).
    """
    labels = tf.convert_to_tensor(labels)
    valid = tf.cast(valid, tf.float32) > 0
    entailed = tf.logical_and(valid, tf.equal(labels, tf.cast(entailment, labels.dtype)))
    same = tf.equal(premise_ids[:, None], premise_ids[None, :])
    n = tf.shape(labels)[0]
    earlier = tf.linalg.band_part(tf.ones([n, n], tf.bool), -1, 0)  # j <= i
    earlier = tf.logical_and(earlier, tf.logical_not(tf.cast(tf.eye(n), tf.bool)))  # j < i
    has_earlier = tf.reduce_any(tf.logical_and(tf.logical_and(same, earlier),
                                               entailed[None, :]), axis=1)
    anchor = tf.logical_and(entailed, tf.logical_not(has_earlier))
    positive = tf.logical_and(tf.logical_and(anchor[:, None], same), entailed[None, :])
    negative = tf.logical_and(tf.logical_and(anchor[:, None], valid[None, :]),
                              tf.logical_not(positive))
    if max_positives and max_positives > 0:
        own = tf.logical_and(positive, tf.cast(tf.eye(n), tf.bool))
        others = tf.logical_and(positive, tf.logical_not(own))
        if max_positives > 1:
            others = cap_mask(others, max_positives - 1, positive_keys)
        else:
            others = tf.zeros_like(others)
        positive = tf.logical_or(own, others)
    if max_negatives and max_negatives > 0:
        negative = cap_mask(negative, max_negatives, negative_keys)
    return positive, negative


def cap_mask(mask, cap, keys):
    """Keeps at most `cap` True entries per row of `mask` (A, C): those with the largest
    `keys` (A, C) (random keys give a random subset). cap <= 0 keeps all."""
    if cap is None or cap <= 0:
        return tf.cast(mask, tf.bool)
    mask = tf.cast(mask, tf.bool)
    scored = tf.where(mask, tf.cast(keys, tf.float32), -1e9)
    # rank of each entry within its row, by descending key
    order = tf.argsort(scored, axis=1, direction="DESCENDING")
    ranks = tf.argsort(order, axis=1)
    return tf.logical_and(mask, ranks < cap)


def batch_standardize(x, epsilon=1e-5):
    """Per-feature standardisation over the batch axis, without scale or offset, float32.

    (x - mean) / sqrt(var + epsilon) with the BIASED batch variance (divide by B), as
    PyTorch's `BatchNorm1d(affine=False)` does in training mode (Barlow Twins' and SCD's
    reference code).
    """
    x = tf.cast(x, tf.float32)
    mean, var = tf.nn.moments(x, axes=[0], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + epsilon)


def scd_loss(h_a, h_b, p_a, p_b, temperature=0.05, alpha=1.0, beta=0.005225, lambd=0.012,
             epsilon=1e-5):
    """SCD's objective (docs/methods.md "SCD"). Returns (L, L_S, L_C), float32 scalars.

    h_a, h_b: (B, H) pooled embeddings of the low- and high-dropout views.
    p_a, p_b: (B, W) projector outputs of h_a and h_b.
      L_S = mean_i cos(h_a_i, h_b_i) / tau (self-contrast; minimised, so the views repel);
      C = bn(p_a)^T bn(p_b) / B, bn = `batch_standardize` (biased variance, eps `epsilon`);
      L_C = sum_j (1 - C_jj)^2 + lambd * sum_{j != k} C_jk^2 (decorrelation);
      L = alpha * L_S + beta * L_C.
    This is the reference code's form (alpha 1, beta 0.005225, lambda 0.012, tau 0.05); the
    paper writes L_S + alpha L_C (alpha 0.005, lambda 0.013) without tau and with a
    spurious minus sign in front of the diagonal term.
    """
    cos = tf.reduce_sum(_l2n(h_a) * _l2n(h_b), axis=-1)
    self_contrast = tf.reduce_mean(cos) / temperature
    za = batch_standardize(p_a, epsilon)
    zb = batch_standardize(p_b, epsilon)
    n = tf.cast(tf.shape(za)[0], tf.float32)
    c = tf.matmul(za, zb, transpose_a=True) / n
    diag = tf.linalg.diag_part(c)
    on_diag = tf.reduce_sum(tf.square(1.0 - diag))
    off_mask = 1.0 - tf.eye(tf.shape(c)[0], tf.shape(c)[1], dtype=tf.float32)
    off_diag = tf.reduce_sum(tf.square(c) * off_mask)
    decorrelation = on_diag + lambd * off_diag
    loss = alpha * self_contrast + beta * decorrelation
    return loss, self_contrast, decorrelation


def embedding_squared_errors(student, target, normalize=False):
    """Per-example mean squared error over the dimensions between student and target
    embeddings, (B, D) x (B, D) -> (B,) float32; its mean over the batch is
    sentence-transformers' MSELoss (a mean over batch and dimensions). `normalize`
    L2-normalises the student first (the target is given as it is meant: normalised when
    the teacher serves normalised vectors)."""
    student = _l2n(student) if normalize else tf.cast(student, tf.float32)
    return tf.reduce_mean(tf.square(student - tf.cast(target, tf.float32)), axis=-1)


def pairwise_binary_cross_entropy(scores, labels):
    """Cross-encoder BCE per query: scores (logits) and labels in [0, 1], (B, K) -> (B,),
    the mean over a query's K pairs of -y log sigmoid(s) - (1 - y) log(1 - sigmoid(s)),
    computed as softplus(s) - y s (stable for large |s|)."""
    scores, labels = tf.cast(scores, tf.float32), tf.cast(labels, tf.float32)
    return tf.reduce_mean(tf.nn.softplus(scores) - labels * scores, axis=-1)


def listwise_cross_entropy(scores, labels):
    """Cross-encoder listwise loss per query: (B, K) scores over one query's passages,
    labels 1 on its positive -> (B,), -log softmax(scores)[positive] (the positive against
    the query's negatives)."""
    scores, labels = tf.cast(scores, tf.float32), tf.cast(labels, tf.float32)
    return tf.reduce_logsumexp(scores, axis=-1) - tf.reduce_sum(labels * scores, axis=-1)


def margin_mse(scores, teacher_scores):
    """MarginMSE per query (docs/methods.md, "Cross-encoder"): (B, 1 + N) student scores
    and teacher scores, the positive first, then N negatives -> (B,), the mean over the N
    negatives of ((s_pos - s_neg_j) - (t_pos - t_neg_j))^2."""
    scores = tf.cast(scores, tf.float32)
    teacher_scores = tf.cast(teacher_scores, tf.float32)
    student = scores[:, :1] - scores[:, 1:]
    teacher = teacher_scores[:, :1] - teacher_scores[:, 1:]
    return tf.reduce_mean(tf.square(student - teacher), axis=-1)

# -- scored pairs (docs/methods.md, "Scored pairs") ----------------------------------------

def pairwise_cosine(u, v):
    """cos(u_i, v_i) row by row: (B, H) x (B, H) -> (B,), float32."""
    return tf.reduce_sum(_l2n(u) * _l2n(v), axis=-1)


def angle_similarity(u, v):
    """AnglE's angle similarity of each row pair, (B, H) x (B, H) -> (B,), float32.

    The first and second halves of an embedding are the real and imaginary parts of H/2
    complex numbers: u = a + bi, v = c + di. The element-wise quotient u / v, rescaled by
    |v| / |u| (the norms of the whole vectors), has real part (a c + b d) / Z and
    imaginary part (b c - a d) / Z with Z = sum(c^2 + d^2) |u| / |v|; the similarity is
    |sum over the H/2 elements of (real + imaginary part)|. It is 1 for u = v and
    invariant to rescaling either vector. H must be even.
    """
    u, v = tf.cast(u, tf.float32), tf.cast(v, tf.float32)
    a, b = tf.split(u, 2, axis=-1)
    c, d = tf.split(v, 2, axis=-1)
    v_sq = tf.reduce_sum(c * c + d * d, axis=-1, keepdims=True)
    norm_ratio = tf.sqrt(tf.reduce_sum(a * a + b * b, axis=-1, keepdims=True) / v_sq)
    real = (a * c + b * d) / v_sq / norm_ratio
    imag = (b * c - a * d) / v_sq / norm_ratio
    return tf.abs(tf.reduce_sum(real + imag, axis=-1))


def cosent_loss(similarities, scores, scale=20.0):
    """CoSENT (Su 2022): log(1 + sum over pairs (i, j) with score_i > score_j of
    exp(scale * (sim_j - sim_i))), for (B,) similarities of B scored pairs and their (B,)
    gold scores. Only the order of the scores matters. Returns a scalar float32."""
    sims = tf.cast(similarities, tf.float32) * scale
    scores = tf.cast(scores, tf.float32)
    diff = sims[None, :] - sims[:, None]                 # [i, j] = s (sim_j - sim_i)
    ordered = scores[:, None] > scores[None, :]          # score_i > score_j
    terms = tf.where(ordered, diff, tf.fill(tf.shape(diff), -1e30))
    return tf.reduce_logsumexp(tf.concat([tf.zeros([1]), tf.reshape(terms, [-1])], 0))


def angle_loss(u, v, scores, scale=20.0, cosine_weight=0.0):
    """AnglE (Li & Li 2023) as implemented here: `cosent_loss` on `angle_similarity`,
    plus `cosine_weight` x `cosent_loss` on the cosine (the paper's cosine term); the
    paper's in-batch-negative term is not included (docs/methods.md)."""
    loss = cosent_loss(angle_similarity(u, v), scores, scale)
    if cosine_weight:
        loss += cosine_weight * cosent_loss(pairwise_cosine(u, v), scores, scale)
    return loss


def cosine_similarity_loss(u, v, targets):
    """Mean squared error between cos(u_i, v_i) and the (B,) targets (gold scores scaled
    to [0, 1]). Returns a scalar float32."""
    err = pairwise_cosine(u, v) - tf.cast(targets, tf.float32)
    return tf.reduce_mean(err * err)
