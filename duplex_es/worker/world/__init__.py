"""The reference world engine (CPU): a seeded procedural terrain steered by camera keys."""
