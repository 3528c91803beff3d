import os
import threading

from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        # Servers started by `make demo` load the model in the background at
        # start-up, so the first request that needs it does not wait seconds.
        if os.environ.get("MAS_WARM_EMBEDDINGS") == "1":
            from mas_core.embeddings import get_model

            threading.Thread(target=get_model, name="warm-embeddings", daemon=True).start()
