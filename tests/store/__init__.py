"""Tests of pmem/store/, one file per module."""
