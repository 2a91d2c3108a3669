"""`MethodSpec`: what `--method=NAME` means, declared next to the method's class.

A spec names the class, the kind of training data it reads, its config fields (each a
`tfsent.checks.Field` with default, type, check and the constructor argument it feeds),
the CPU-demo values of run fields (`run_defaults`; paper recipes live in configs/), and an
optional validation hook for checks that span fields. `tfsent.training.config` derives
validation, the known fields and the help text from it; `build` makes the model from a run
config.
"""

from tfsent.data.kinds import DATA_KINDS
from tfsent.errors import ConfigError
from tfsent.formats.model_paths import check_bi_encoder

# Run fields every method's constructor takes.
COMMON_RUN_ARGS = {"pooling": "train_pooling", "export_pooling": "export_pooling"}


class MethodSpec:
    """A registry entry.

    Args:
        name: the `--method` value.
        cls: the SentenceMethod subclass.
        data_kind: one of DATA_KINDS (the `tfsent.data.kinds` record of what the run reads
            and batches).
        doc: one line for `--help`.
        fields: the method's own config fields (`tfsent.checks.Field`; `arg` names the
            constructor argument a field feeds, None for one read by the run itself).
        run_defaults: values of run fields (or of its own fields) for the CPU demo.
        run_args: run fields the constructor also takes, {field: argument} (pooling and
            export_pooling always).
        constants: constructor arguments fixed by this entry (e.g. `supervised=True`).
        validate: `fn(config)` raising ConfigError for checks that span fields.
        builder: `fn(config, load) -> model` for a method that loads its encoders itself
            (distill: a teacher and a student); `load(name, pooling=...)` loads an encoder
            with the run's settings. None: `build` on `load(config.encoder)`.
        encoder_pooling: `fn(encoder name) -> pooling`, the run's pooling when no recipe
            or override sets it, read from the encoder's files (the cross-encoder: the
            token its head reads); None: `run_defaults` or the encoder's own.
    """

    def __init__(self, name, cls, data_kind, doc, fields=(), run_defaults=None,
                 run_args=None, constants=None, validate=None, builder=None,
                 encoder_pooling=None):
        if data_kind not in DATA_KINDS:
            raise ValueError(f"{name}: unknown data kind {data_kind!r}")
        self.name = name
        self.cls = cls
        self.data_kind = data_kind
        self.doc = doc
        self.fields = tuple(fields)
        self.run_defaults = dict(run_defaults or {})
        self.run_args = dict(COMMON_RUN_ARGS, **(run_args or {}))
        self.constants = dict(constants or {})
        self.validate_hook = validate
        self.builder = builder
        self.encoder_pooling = encoder_pooling

    @property
    def premise_grouped(self):
        """NLI pairs in premise-grouped batches (`tfsent.data.grouping`), as the class says."""
        return bool(getattr(self.cls, "premise_grouped", False))

    @property
    def defaults(self):
        """{field: value} this method adds to or changes in the run config."""
        defaults = {f.name: f.default for f in self.fields}
        defaults.update(self.run_defaults)
        return defaults

    def field(self, name):
        """The method's Field called `name` (None if it has none)."""
        return next((f for f in self.fields if f.name == name), None)

    def constructor_args(self, config):
        """The constructor's keyword arguments from a run config."""
        kwargs = dict(self.constants)
        for field, arg in self.run_args.items():
            kwargs[arg] = config[field]
        for field in self.fields:
            if field.arg is not None:
                kwargs[field.arg] = config[field.name]
        return kwargs

    def build(self, encoder, config):
        """The method model on `encoder` from a run config."""
        return self.cls(encoder, **self.constructor_args(config))

    def build_run_model(self, config, load):
        """The method model of a run: `builder(config, load)`, or `build` on the encoder
        `load(config.encoder)` gives."""
        if self.builder is not None:
            return self.builder(config, load)
        return self.build(load(config.encoder), config)

    def validate(self, config):
        """Checks the method's fields (type and value), that a sentence-embedding method's
        `encoder` is no cross-encoder (`formats.model_paths`), and runs the validation
        hook."""
        if not getattr(self.cls, "scores_pairs", False):
            check_bi_encoder(config.get("encoder"), "encoder",
                             hint=f" (method {self.name} trains sentence embeddings)")
        for field in self.fields:
            if field.name in config:
                field.validate(config[field.name])
        if self.validate_hook is not None:
            self.validate_hook(config)

    def help_line(self):
        """"name: doc" for `--help`."""
        return f"{self.name}: {self.doc}"


def collect(*groups):
    """{name: spec} from the specs (or lists of specs) of the method modules; a name
    declared twice is an error."""
    registry = {}
    for group in groups:
        for spec in (group if isinstance(group, (list, tuple)) else [group]):
            if spec.name in registry:
                raise ConfigError(f"method {spec.name!r} is declared twice")
            registry[spec.name] = spec
    return registry
