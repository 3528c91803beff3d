"""The foundation: teams, roles, tokens, the event log, the definitions framework and the helpers every app uses.

It imports no app (pyproject.toml, import-linter); the apps above register into it at start-up.
"""
