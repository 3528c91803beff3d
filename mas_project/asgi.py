import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

# Websocket routes arrive with the live monitor; HTTP is plain Django.
application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": URLRouter([])})
