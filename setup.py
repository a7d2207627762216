"""The repository keeps its top-level folders; the wheel maps them under one `perfbisect` package
(the rest of the metadata is in pyproject.toml)."""
from setuptools import find_packages, setup

FOLDERS = ("service", "workers", "kernels", "migrations", "dashboards")

setup(
    packages=["perfbisect"] + [f"perfbisect.{name}" for top in FOLDERS
                               for name in (top, *(f"{top}.{sub}" for sub in find_packages(top)))],
    package_dir={f"perfbisect.{top}": top for top in FOLDERS},
)
