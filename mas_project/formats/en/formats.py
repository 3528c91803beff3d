"""Dates and times on every page, admin and monitor alike: ``2026-11-26 14:05`` in the server's ``TIME_ZONE``.

Django writes a datetime in the language's own formats (``Nov. 26, 2026, 2:05 p.m.`` and ``11/26/2026 2:05 p.m.``
for English) unless a project gives its own; the monitor's script writes the same as these
(``agents_app/static/monitor/runs.js``). Only output: what forms accept (``*_INPUT_FORMATS``) stays Django's.
"""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
