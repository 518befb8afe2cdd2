"""Errors a user can cause, with the one-line message and exit code the CLI gives them."""

EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3  # the host lacks what the command needs (GPU, library, engine)


class UserError(Exception):
    """An error with a one-line message for the user and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code
