"""The one exception type for bad user input."""


class UserInputError(Exception):
    """Bad input from the user (config, env id, checkpoint, ...).

    The message names the problem and the fix in one line; the command line prints it
    without a traceback and exits with status 2.
    """


class NonFiniteError(UserInputError):
    """A NaN or an infinity in what the environment returned, in a training loss or in the
    weights. Training stops with one line naming the quantity and the step; no checkpoint
    with non-finite weights is ever written."""
