"""Ways in and out of pmem that follow other tools' conventions.

- `actions`: the memory actions an agent gets (search, recall, remember, forget, pin, update),
  each with bounded output; the MCP server and the llm toolbox both call these.
- `mcp_server`: `pmem mcp`, a stdio MCP server built on the official SDK (extra `pmem-cli[mcp]`).
- `hooks`: agent hooks (Claude Code, Codex, Gemini CLI) that put memories in front of the model.
- `clients`: the settings files and config snippets of those clients.
- `context`: a block of core memories kept inside AGENTS.md, CLAUDE.md, GEMINI.md...
- `llm_plugin`: fragment loader and toolbox for Simon Willison's `llm` (entry point `llm`).

Nothing here is imported by `import pmem`; each module imports its host's package only when used.
"""
