from ninja import NinjaAPI

api = NinjaAPI(title="MAS API", version="1.0.0")
