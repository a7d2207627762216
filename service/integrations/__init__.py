"""Clients of the external services perfbisect talks to, one module per service, used by every
domain that talks to it (polar's `integrations/` layout). They import only Settings, never a
domain package, so any domain may import them."""
