"""`perfbisect`, the command line: the top layer. It may import service/, workers/ and kernels/;
nothing imports it (tests/test_cli_layout.py). common.py holds what every command shares and
imports nothing else of the CLI; main.py, the entry point, is imported by no command module."""
