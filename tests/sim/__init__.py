"""Tests of the device simulator: it must behave like stock firmware."""
