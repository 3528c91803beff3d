# Memory rows (pgvector) arrive with the memory issue; the extension is created
# by this app's first migration so every later app can rely on it.
