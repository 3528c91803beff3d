"""Doors beside MAS's own API: the OpenAI-compatible endpoint (:mod:`agents_app.doors.openai_compat`), each
run through ``run_start`` like ``POST /api/runs``, followed by :mod:`agents_app.doors.follow`."""
