"""API tokens and what each scope may do (issue 9: writes always need a token)."""
