"""An agent hook's session files: a week old, they go; the folder is swept when a session
starts, not at every prompt (a stat per file, on the path every prompt waits for)."""

from __future__ import annotations

import os
import time

from pmem.integrations import hooks
from pmem.service import MemoryStore


def _aged(name: str, days: float):
    folder = hooks.state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text('{"given": {}, "turn": 1}')
    then = time.time() - days * 86400
    os.utime(path, (then, then))
    return path


def test_old_session_files_go_when_a_session_starts_not_at_every_prompt(fake_config):
    with MemoryStore(config=fake_config) as store:
        store.add("The cabin wifi password is hunter2")
        old, recent = _aged("old", hooks.STATE_DAYS + 1), _aged("recent", 1)

        def prompt(text: str) -> str:
            return hooks.build_context(store, "user-prompt", hooks.HookInput(session_id="s1", prompt=text),
                                       hooks.HookSettings(min_similarity=0.0))

        assert "hunter2" in prompt("cabin wifi password")
        assert not old.exists() and recent.exists()  # a new session: the folder was swept
        later = _aged("later", hooks.STATE_DAYS + 1)
        prompt("and the wifi again")
        assert later.exists()  # the same session's next prompt: no sweep
        hooks.build_context(store, "user-prompt", hooks.HookInput(session_id="s2", prompt="wifi"),
                            hooks.HookSettings(min_similarity=0.0))
        assert not later.exists() and recent.exists()
