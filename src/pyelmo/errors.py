"""Errors that pyelmo reports to users as one clear line."""


class PyelmoError(Exception):
    """A user-facing error: the CLI prints its message on one line and exits non-zero."""


class WeightFileError(PyelmoError):
    """A weight or options file is missing, unreadable, corrupt or contradicts its configuration."""


class InputError(PyelmoError):
    """Input text or arguments that pyelmo cannot process."""


class ConfigError(PyelmoError):
    """A model or training configuration that is malformed or out of range."""
