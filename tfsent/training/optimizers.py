"""Optimizers Keras does not ship: LARS (You et al., 2017), as SimCLR and CLSR use it."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfsent")
class LARS(keras.optimizers.Optimizer):
    """Layer-wise Adaptive Rate Scaling with momentum (SimCLR's variant).

    For each variable w with gradient g (variables whose path matches `exclude` -- biases
    and normalisation parameters by default -- get neither weight decay nor adaptation):
        g' = g + weight_decay * w
        trust = eta * ||w|| / ||g'||   if ||w|| > 0 and ||g'|| > 0, else 1
        v <- momentum * v + learning_rate * trust * g'
        w <- w - v

    Args:
        learning_rate: float or schedule.
        momentum: 0.9.
        weight_decay: L2 coefficient added to the gradient (1e-4 in CLSR / SimCLR). Keras's
            own decoupled weight decay is not used (`weight_decay` is consumed here).
        eta: trust coefficient (0.001).
        exclude: substrings of variable paths excluded from decay and adaptation.
    """

    def __init__(self, learning_rate=0.5, momentum=0.9, weight_decay=1e-4, eta=0.001,
                 exclude=("bias", "beta", "gamma", "batch_norm"), name="lars", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = float(momentum)
        self.lars_weight_decay = float(weight_decay)
        self.eta = float(eta)
        self.exclude = tuple(exclude)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.velocities = [self.add_variable_from_reference(v, "velocity") for v in variables]
        # Decided once from the Keras variables' paths (update_step may see raw TF ones).
        self._adapted_flags = [not any(token in v.path for token in self.exclude)
                               for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        if self._adapted_flags[self._get_variable_index(variable)]:
            g = g + ops.cast(self.lars_weight_decay, variable.dtype) * variable
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            g_norm = ops.sqrt(ops.sum(ops.square(g)))
            trust = ops.where(ops.logical_and(w_norm > 0, g_norm > 0),
                              self.eta * w_norm / ops.maximum(g_norm, 1e-12), 1.0)
            g = g * ops.cast(trust, variable.dtype)
        v = self.velocities[self._get_variable_index(variable)]
        self.assign(v, ops.cast(self.momentum, variable.dtype) * v + lr * g)
        self.assign_sub(variable, v)

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum, "weight_decay": self.lars_weight_decay,
                       "eta": self.eta, "exclude": list(self.exclude)})
        return config
