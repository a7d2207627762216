"""The web dashboard: TFLOP/s (or GB/s, ms...) history per repository, kernel and case, with the
culprits marked, and the jobs list and job pages. Server-side rendered (Jinja2 + inline SVG drawn
in Python): the machines are offline, so no CDN and no JS build.

Module roles: `repository.py` holds all SQL, `history.py` turns rows into per-case series (pure),
`charts.py` draws a chart as SVG text (pure), `routes.py` parses requests and renders templates.
"""
