"""Unit tests of the pure protocol package (no Home Assistant)."""
