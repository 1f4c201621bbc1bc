"""The one exception type for bad user input."""


class UserInputError(Exception):
    """Bad input from the user (config, env id, checkpoint, ...).

    The message names the problem and the fix in one line; the command line prints it
    without a traceback and exits with status 2.
    """
