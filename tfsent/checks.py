"""Argument checks shared by the constructors and `tfsent.training.config.validate`.

A range is defined once here; a constructor checks its argument with it and the run
config checks the field that feeds that argument with the same object, so the two cannot
disagree. Every failure is a ConfigError naming the argument or field.
"""

import math
import numbers

from tfsent.errors import ConfigError


class Range:
    """A closed, open or half-open interval of numbers (`integer=True`: whole numbers).

    Args:
        low, high: bounds (None: unbounded).
        low_open, high_open: exclude the bound.
        integer: accept only integers (bools are never numbers here).
    """

    def __init__(self, low=None, high=None, low_open=False, high_open=False, integer=False):
        self.low, self.high = low, high
        self.low_open, self.high_open = low_open, high_open
        self.integer = integer

    def describe(self):
        """The interval as text, e.g. "in [0, 1)", "> 0" or "an integer >= 0"."""
        low, high = (b if b is None or isinstance(b, int) else f"{b:g}"
                     for b in (self.low, self.high))
        if self.low is not None and self.high is not None:
            text = (f"in {'(' if self.low_open else '['}{low}, {high}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {low}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {high}"
        else:
            text = "any number"
        return f"an integer {text}" if self.integer else text

    def contains(self, value):
        """True if `value` is a finite number (an integer if required) inside the
        interval."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if not isinstance(value, numbers.Integral) and not math.isfinite(value):  # NaN, inf
            return False
        if self.integer and int(value) != value:
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open
                                      else value > self.high):
            return False
        return True

    def check(self, name, value):
        """Returns `value` as int or float, or raises ConfigError naming `name`."""
        if not self.contains(value):
            raise ConfigError(f"{name} must be {self.describe()}, got {value!r}")
        return int(value) if self.integer else float(value)


POSITIVE = Range(0.0, low_open=True)                            # temperatures, rates > 0
NON_NEGATIVE = Range(0.0)                                       # loss weights
UNIT_INTERVAL = Range(0.0, 1.0)                                 # [0, 1]: lambda, warmup
RATE = Range(0.0, 1.0, high_open=True)                          # [0, 1): dropout, cutoffs
OPEN_RATE = Range(0.0, 1.0, low_open=True, high_open=True)      # (0, 1): MLM mask rate
COUNT = Range(0, integer=True)                                  # >= 0 (0: off / all)
SIZE = Range(1, integer=True)                                   # >= 1
SEED = Range(0, 2 ** 32 - 1, integer=True)                      # what NumPy seeds take


class Choices:
    """A fixed set of accepted values (e.g. pooling names); `check` like `Range.check`."""

    def __init__(self, values):
        self.values = tuple(values)

    def describe(self):
        """"one of a, b, c"."""
        return f"one of {', '.join(map(str, self.values))}"

    def contains(self, value):
        """True if `value` is one of the values."""
        return value in self.values

    def check(self, name, value):
        """Returns `value`, or raises ConfigError naming `name`."""
        if value not in self.values:
            raise ConfigError(f"{name} must be {self.describe()}, got {value!r}")
        return value


def one_of(name, value, choices):
    """Returns `value` if it is one of `choices`, else raises ConfigError naming `name`."""
    return Choices(choices).check(name, value)


# The kinds of value a config field holds, as a recipe must give them.
_TYPE_TEXT = {bool: "a boolean (True/False)", int: "an integer", float: "a number",
              str: "a string", dict: "a dict", tuple: "a list"}


def _has_type(value, kind):
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind is tuple:
        return isinstance(value, (list, tuple))
    return isinstance(value, kind)


class Field:
    """A run-config field: its default, the Python type(s) a value must have, the check of
    its value, and (for a method's field) the constructor argument it feeds.

    Args:
        name: the config field (`--config.NAME`).
        default: its default.
        check: a `Range`, `Choices` or a function `(name, value)` raising ConfigError
            (None: any value of the right type).
        types: accepted types among bool, int, float (any real number), str, dict, tuple
            (a list or tuple); default: from `check` (a Range: int or float; Choices: the
            choices' type) or else from `default`.
        optional: None is accepted too.
        arg: the constructor argument it feeds (methods; None: read by the run itself).
        doc: one line of help.
    """

    def __init__(self, name, default, check=None, types=None, optional=False, arg=None,
                 doc=""):
        self.name = name
        self.default = default
        self.check = check
        if types is None:
            if isinstance(check, Range):
                types = (int,) if check.integer else (float,)
            elif isinstance(check, Choices) and all(isinstance(v, str) for v in check.values):
                types = (str,)
            elif default is not None:
                types = (float,) if type(default) is float else (type(default),)
        self.types = tuple(types or ())
        self.optional = optional or default is None
        self.arg = arg
        self.doc = doc

    def type_text(self):
        """What a value must be, e.g. "a number" or "a string or None"."""
        text = " or ".join(_TYPE_TEXT.get(t, t.__name__) for t in self.types)
        return f"{text} or None" if self.optional else text

    def check_type(self, value, where=None):
        """Raises ConfigError (naming the field and `where`, e.g. the recipe file) when
        `value` is not of the field's type: a string "false" for a boolean, a number for a
        string, a string for a number."""
        if value is None and self.optional:
            return
        if self.types and not any(_has_type(value, t) for t in self.types):
            got = f"the string {value!r}" if isinstance(value, str) else \
                f"{type(value).__name__} {value!r}"
            place = f"{where}: " if where else ""
            raise ConfigError(f"{place}{self.name} must be {self.type_text()}, got {got}")

    def validate(self, value, where=None):
        """Type check, then the value check; ConfigError naming the field."""
        self.check_type(value, where)
        if value is None and self.optional:
            return
        if isinstance(self.check, (Range, Choices)):
            self.check.check(self.name, value)
        elif self.check is not None:
            self.check(self.name, value)
