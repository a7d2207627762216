"""The GitHub PR bot: the `pull_request` webhook that starts a compare job (endpoints.py,
service.py), and the comments that report a finished job on its pull requests (github.py)."""
