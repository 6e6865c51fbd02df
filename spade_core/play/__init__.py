"""The agent's side: episodes played against jailed environments, the agent's prompts, actions and hints
(docs/DESIGN.md §2)."""
