"""What the kernel refuses, with a message for the caller (the API maps these to 4xx answers).
"""

from __future__ import annotations


class RunError(ValueError):
    """A request the kernel refuses, with a message for the caller."""


class LimitExceeded(RunError):
    pass


class InvalidOutput(RunError):
    """A step output its declared schema refuses (the message lists why, for the model to correct)."""


class ScriptError(RunError):
    """A run's script the kernel cannot play (its message names the agent and turn)."""


class UnknownGuardrails(RunError):
    """A run start names guardrails the team does not have (the API answers 422 on ``guardrails``)."""


class InputBlocked(RunError):
    """A ``run_input`` guardrail with action block found something in a run's input: nothing is started or kept
    (the API answers 422 on ``input``, naming the guardrail, never what it found)."""
