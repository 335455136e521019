"""Tests of pmem/dream/: planning, applying, costs, languages and the real generation model."""
