"""Outbound web access for tools: the SSRF guard and the fetcher."""
