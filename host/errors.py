"""The user-facing error type shared by the `edgetwin` subcommands."""


class UserError(Exception):
    """A mistake the user can fix (unknown board, missing port...): printed as one line, exit code 2."""
