"""The measuring harness: runner (parent side), trial (child side), timing, schema."""
