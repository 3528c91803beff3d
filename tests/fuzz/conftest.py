"""The API's OpenAPI schema for schemathesis, served by the real Django application (WSGI)."""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application


@pytest.fixture
def api_schema(db):
    # As Django's test client does: requests must not close the test's database connection.
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
