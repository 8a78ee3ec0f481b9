"""Helpers for testing and measuring against real services (a local llama.cpp server)."""
