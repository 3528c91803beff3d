from ninja import NinjaAPI

from mas_project.health import router as health_router

api = NinjaAPI(title="MAS API", version="1.0.0")
api.add_router("/", health_router)
