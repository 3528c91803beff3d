"""The ``eval`` definition kind: datasets as markdown under ``defs/evals/<slug>.md``."""

from mas_core.definitions.kinds import Kind
from evals_app.specs import EvalSpec

EVAL = Kind("eval", "Eval dataset", "evals_app.EvalDataset", EvalSpec, "evals")
