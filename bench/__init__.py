"""Benchmarks of Xiaozhi Local (not part of the test run): ``python -m bench audio``."""
