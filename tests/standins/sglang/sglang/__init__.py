"""STAND-IN for SGLang (rehearsal tests only): same launcher flags and HTTP API, simulated model, no GPU."""

__version__ = "0.5.23+standin"
