"""Writes chat.history.md with aider's own InputOutput (aider-chat 0.86.2, aider/io.py), the
class aider uses to append `.aider.chat.history.md`: two sessions, a multi-line request, tool
output and a confirmation, as aider's main loop calls them. Run it where aider is importable:

    python tests/data/aider/make_history.py tests/data/aider/chat.history.md

It is not run by the tests (aider is no dependency); tests/integrations/importers/test_aider.py
also runs it against the installed aider when there is one.
"""

import sys
from pathlib import Path

from aider.io import InputOutput


def write(path: Path) -> None:
    io = InputOutput(pretty=False, fancy_input=False, yes=True, chat_history_file=path)
    io.tool_output("Aider v0.86.2", log_only=True)  # as main() announces itself
    io.user_input("/add parser.py")
    io.tool_output("Added parser.py to the chat")
    io.user_input("The parser drops the last line when the file has no trailing newline.\n"
                  "Please fix it and keep the tests green.")
    io.ai_output("The loop stops at the last `\\n`, so a final line without one is lost.\n\n"
                 "parser.py\n```python\nfor line in text.splitlines():\n    yield line\n```")
    io.confirm_ask("Apply the edit to parser.py?")
    io.tool_output("Applied edit to parser.py")
    io.tool_output("Tokens: 2.1k sent, 180 received.")
    io.user_input("/ask why splitlines and not split('\\n')?")
    io.ai_output("`splitlines` also splits on `\\r\\n` and leaves no empty string after a final newline.")
    io2 = InputOutput(pretty=False, fancy_input=False, yes=True, chat_history_file=path)
    io2.user_input("Rename the module to reader.py")
    io2.ai_output("Done: parser.py is now reader.py and the imports follow it.")
    io2.tool_warning("reader.py: 1 import updated")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
