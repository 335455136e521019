"""Tests of pmem/cli/: the command line, its errors, its lazy loading, the hook fast path and the generated docs."""
