"""The toolchain axis of a bisect (issue 44): `rules` (pure, version order and wheel names)."""
