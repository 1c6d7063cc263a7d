"""Errors the engine raises for bad input. Each carries a message meant for a person."""


class KbenchError(Exception):
    """Base class: a clear, one-paragraph message that names the file and the cause."""


class ConfigError(KbenchError):
    """A config file or flag has an unknown key or a value of the wrong type (engine.config re-exports it)."""


class DataError(KbenchError, ValueError):
    """JSON a reader was given (a result file, a message between processes, a stored record) does not hold the
    dataclass it should (engine.jsonable). Still a ValueError for callers that catch what json.loads raises."""


class TaskError(KbenchError):
    """A task folder or file is malformed."""


class TaskWarning(UserWarning):
    """A task loads but breaks a documented rule (fewer than 3 configs, say); the CLI prints it as
    `kbench: warning: ...`."""


class CandidateError(KbenchError):
    """A candidate's files are missing or not in a recognised format."""


class MissingDirectionError(TaskError, KeyError):
    """A task asked for a direction it does not have (`--backward` on a forward-only task). Still a KeyError
    for callers that look the direction up like a mapping key."""

    def __str__(self) -> str:       # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""
