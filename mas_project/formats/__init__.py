"""MAS's date formats (``FORMAT_MODULE_PATH``): one way to write a moment on every page."""
