"""The designer's side: prompts and parsing of designs, parameter mutation, the corpus, the environment
memory, novelty, code repairs and the LLM validator (docs/DESIGN.md §2)."""
