"""Exceptions raised by rbfm, so callers can catch the library's own errors precisely."""


class RbfmError(Exception):
    """Base class of every error rbfm raises on purpose."""


class ConfigError(RbfmError, ValueError):
    """An unknown name or an out-of-range value was requested (domain, task, perturbation...)."""


class DatasetError(RbfmError):
    """A dataset on disk is missing, empty, corrupt or does not fit its domain."""


class InUseError(RbfmError):
    """A folder is held by another process (rbfm.locks): two runs would write into it."""


def unknown(kind: str, value: object, valid: object) -> ConfigError:
    """Builds the error for an unknown choice, listing the valid ones."""
    choices = ", ".join(str(v) for v in valid)  # type: ignore[attr-defined]
    return ConfigError(f"unknown {kind} {value!r}; valid choices: {choices}")
