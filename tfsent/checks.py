"""Argument checks shared by the constructors and `tfsent.config.validate`.

A range is defined once here; a constructor checks its argument with it and the run
config checks the field that feeds that argument with the same object, so the two cannot
disagree. Every failure is a ConfigError naming the argument or field.
"""

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
        if self.low is not None and self.high is not None:
            text = (f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = "any number"
        return f"an integer {text}" if self.integer else text

    def contains(self, value):
        """True if `value` is a number (an integer if required) inside the interval."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integer and int(value) != value:
            return False
        if value != value:  # NaN
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


def one_of(name, value, choices):
    """Returns `value` if it is one of `choices`, else raises ConfigError naming `name`."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, choices))}, "
                          f"got {value!r}")
    return value
