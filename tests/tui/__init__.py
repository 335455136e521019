"""Tests of the TUI (pmem/tui/), one file per screen; fixtures in conftest.py, Pilot steps in pilot.py."""
