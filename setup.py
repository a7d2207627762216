"""The repository keeps its top-level folders; the wheel maps them under one `perfbisect` package
(the rest of the metadata is in pyproject.toml). The dashboard's asset folders (static/, its
vendored libraries) hold no Python, but setuptools treats every folder under a package as a
package: they are listed as such, with their files as package data, so no build warns about
"packages absent from the packages configuration"."""
from setuptools import find_namespace_packages, find_packages, setup

FOLDERS = ("cli", "service", "workers", "kernels", "migrations", "dashboards")
ASSETS = [f"dashboards.{name}" for name in find_namespace_packages("dashboards", include=["static", "static.*"])]

setup(
    packages=["perfbisect"] + [f"perfbisect.{name}" for top in FOLDERS
                               for name in (top, *(f"{top}.{sub}" for sub in find_packages(top)))]
    + [f"perfbisect.{name}" for name in ASSETS],
    package_dir={f"perfbisect.{top}": top for top in FOLDERS},
    package_data={f"perfbisect.{name}": ["*"] for name in ASSETS},
)
