"""Tests of Xiaozhi Local."""
