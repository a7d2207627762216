"""The migrations, one file each, named `NNNN_<what>.py` with NNNN its place in the apply order
(0001 first, every file revising the one before it; tests/test_migrations.py checks both).

The `revision` ids inside are the ones deployed databases are stamped with, so they never change:
an id's own number is historical and is not the file's (`0014_gate.py` holds revision
`0011_gate`). A new migration takes the next file number and an id of the same name."""
