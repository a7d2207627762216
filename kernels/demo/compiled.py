"""The compiled demo (issue 45): cppkern, a small library with a real C++ extension built by
setuptools, and a history of 20 first-parent commits that plants one regression in the C++
code: a column sum whose loops walk a row-major matrix down its columns (a stride of a whole row
per element) instead of along its rows.

    write_compiled_repo(path) -> path   the git repository (fixed dates: the same shas each time)
    COMPILED_CASES, COMPILED_POLICY     its case (a custom suite in the repository) and policy
    build_command(incremental)          today's build, or one in a kept build tree with ccache
    COMPILED_INPUTS                     the declared build inputs (the build cache's key)

A full build compiles fourteen translation units one after another (setuptools compiles one
extension's sources serially, --parallel or not): the module, the column sum and twelve units heavy
on templates, about 30 s of CPU. Like a real library's, most units are untouched by the range: its
commits touch only Python, only tests or docs, or only one translation unit, four units in all, so
the two ends share ten units' objects and an incremental build with a compiler cache recompiles
little. GROUND_TRUTH.json (last commit) names the planted commit.
"""
from __future__ import annotations

import json
from pathlib import Path

from perfbisect.kernels.demo.gitwrite import commit_all, git
from perfbisect.kernels.demo.writer import EPOCH, _write_files

TARGET = "cppkern.ops:colsum_weighted"
SUITE = "file:bench/colsum_suite.py"
COMPILED_CASES = [{"suite": SUITE, "target": TARGET, "params": {"n": 1024}}]
COMPILED_POLICY = {"min_samples": 7, "max_samples": 15, "max_time_s": 0.5, "rel_noise": 0.01, "warmup": 2,
                   "threads": 1}
COMPILED_INPUTS = ["setup.py", "csrc/", "src/"]
IMPORT_ROOT = ".perfbisect-build"
PLANTED = 9  # the index of the regression's commit


def build_command(incremental: bool) -> str:
    """setuptools' build_py and build_ext into the revision's build directory; the objects in
    the slot's kept build tree (incremental: ccache and the tree serve what did not change) or in
    the build's TMPDIR (today: every build compiles everything)."""
    temp = "{build_tree}" if incremental else '"$TMPDIR/build-temp"'
    return ("{python} setup.py -q build_py --build-lib {build_dir} "
            f"build_ext --build-lib {{build_dir}} --build-temp {temp} --parallel 2")


SETUP = """import glob

from setuptools import Extension, setup

setup(
    name="cppkern",
    version="0.1",
    packages=["cppkern"],
    package_dir={"": "src"},
    ext_modules=[Extension("cppkern._native", sorted(glob.glob("csrc/*.cpp")), include_dirs=["csrc"],
                           extra_compile_args=["-O2", "-std=c++17"], language="c++")],
)
"""

# The library's units besides the module and the column sum: (name, key separator), each a
# template-heavy translation unit of ROWS key kinds. A short range of a real library touches few of
# its units: the history below touches three of these twelve (and the column sum).
UNITS = [("parse", ","), ("tables", ":"), ("format", "/"), ("tokens", ";"), ("units", "|"), ("dates", "-"),
         ("paths", "."), ("query", "&"), ("stats", " "), ("histogram", "#"), ("encode", "%"), ("config", "=")]
ROWS = 3


def header_source() -> str:
    declarations = "".join(f"double {name}_score(const char* s);\n" for name, _ in UNITS)
    return f"#pragma once\nnamespace cppkern {{\ndouble colsum_weighted(const double* a, long n);\n{declarations}}}\n"


MODULE = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "cppkern.h"

static PyObject* py_colsum(PyObject*, PyObject* args) {
  Py_buffer view;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "y*n", &view, &n)) return NULL;
  if (n < 0 || view.len < (Py_ssize_t)(n * n * sizeof(double))) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "the buffer holds fewer than n*n doubles");
    return NULL;
  }
  double total;
  Py_BEGIN_ALLOW_THREADS
  total = cppkern::colsum_weighted(static_cast<const double*>(view.buf), n);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  return PyFloat_FromDouble(total);
}

static PyObject* py_score(PyObject*, PyObject* args) {
  const char* s;
  if (!PyArg_ParseTuple(args, "s", &s)) return NULL;
  return PyFloat_FromDouble(SCORES);
}

static PyMethodDef methods[] = {
  {"colsum_weighted", py_colsum, METH_VARARGS, "sum of column j times (j + 1) of a row-major n x n matrix"},
  {"score", py_score, METH_VARARGS, "a score of a string of separated keys"},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
"""

ROW_LOOPS = """  for (long i = 0; i < n; ++i)    // a is row-major: the inner loop walks memory in order
    for (long j = 0; j < n; ++j) col[j] += a[i * n + j];"""
COLUMN_LOOPS = """  for (long j = 0; j < n; ++j)    // one column at a time
    for (long i = 0; i < n; ++i) col[j] += a[i * n + j];"""


def reduce_source(loops: str) -> str:
    return f"""#include <vector>
#include "cppkern.h"

namespace cppkern {{
double colsum_weighted(const double* a, long n) {{
  std::vector<double> col(n, 0.0);
{loops}
  double total = 0.0;
  for (long j = 0; j < n; ++j) total += col[j] * (j + 1);
  return total;
}}
}}  // namespace cppkern
"""


def heavy_source(name: str, function: str, separator: str, rows: int) -> str:
    """A translation unit heavy on templates (map, unordered_map, sort, streams: `rows`
    instantiations): one of the many units of a real library."""
    return f"""// {name}: scores separated key lists (template-heavy, like most of a real library's units)
#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include "cppkern.h"

namespace {{
template <int I> double row(const std::string& s) {{
  std::map<std::string, std::vector<std::pair<int, double>>> found;
  std::unordered_map<std::string, int> seen;
  std::istringstream in(s);
  std::string key;
  while (std::getline(in, key, '{separator}')) {{
    found[key].push_back({{I, double(key.size())}});
    ++seen[key];
  }}
  std::vector<double> v;
  for (auto& kv : found) for (auto& p : kv.second) v.push_back(p.second * (I + 1) + seen[kv.first]);
  std::sort(v.begin(), v.end(), std::greater<double>());
  std::stable_sort(v.begin(), v.end());
  std::ostringstream out;
  out << v.size() << I;
  return v.empty() ? 0.0 : v.front() + out.str().size();
}}
template <int... Is> double rows(const std::string& s, std::integer_sequence<int, Is...>) {{
  return (row<Is>(s) + ...);
}}
}}  // namespace

namespace cppkern {{
double {function}(const char* s) {{ return rows(std::string(s), std::make_integer_sequence<int, {rows}>{{}}); }}
}}  // namespace cppkern
"""


OPS = '''"""cppkern's Python API: thin wrappers over the C++ extension."""
from cppkern import _native


def colsum_weighted(matrix, n):
    """Sum over j of (j + 1) times the sum of column j of `matrix`, a row-major n x n buffer of doubles."""
    return _native.colsum_weighted(matrix, n)


def score(text):
    """A score of a key=value string (parser, table and formatter)."""
    return _native.score(text)
'''

SUITE_SOURCE = '''"""The column sum of an n x n matrix of doubles (1024: 8 MiB), in GB/s."""
import numpy as np
import torch

METRIC = "GB/s"
TOLERANCE = 1e-9


def make_inputs(params, device, generator):
    n = params["n"]
    return (torch.rand(n * n, generator=generator, dtype=torch.float64).numpy(), n)


def bytes_moved(params):
    return params["n"] ** 2 * 8


def reference(inputs, params):
    matrix, n = inputs
    return float(matrix.reshape(n, n).sum(axis=0) @ np.arange(1, n + 1, dtype=np.float64))


def control(inputs, params):
    matrix, _ = inputs
    return float(matrix.sum())
'''

TESTS = '''import array

from cppkern import ops


def test_colsum_weighted():
    assert ops.colsum_weighted(array.array("d", [1, 2, 3, 4]), 2) == (1 + 3) * 1 + (2 + 4) * 2
'''


def _unit(name: str, rows: int = ROWS, separator: str | None = None) -> dict[str, str]:
    """csrc/<name>.cpp, one of UNITS, with `rows` key kinds (and another separator)."""
    default = dict(UNITS)[name]
    return {f"csrc/{name}.cpp": heavy_source(f"{name}.cpp", f"{name}_score", separator or default, rows)}


def _history() -> list[tuple[str, dict[str, str]]]:
    """(subject, files written) per commit, oldest first."""
    scores = " + ".join(f"cppkern::{name}_score(s)" for name, _ in UNITS)
    units = {path: text for name, _ in UNITS for path, text in _unit(name).items()}
    initial = {"setup.py": SETUP, "csrc/cppkern.h": header_source(),
               "csrc/module.cpp": MODULE.replace("SCORES", scores), "csrc/reduce.cpp": reduce_source(ROW_LOOPS), **units,
               "src/cppkern/__init__.py": '"""cppkern: kernels in C++."""\n', "src/cppkern/ops.py": OPS,
               "tests/test_ops.py": TESTS, "bench/colsum_suite.py": SUITE_SOURCE,
               "README.md": "# cppkern\n\nKernels in C++ with a Python API.\n"}
    py = OPS.replace('"""cppkern\'s Python API', '"""cppkern\'s Python API (see README)')
    return [
        ("cppkern: initial import (#1)", initial),
        ("docs: build instructions (#2)", {"README.md": initial["README.md"] + "\npython setup.py build_ext\n"}),
        ("ops: say where the API is documented (#3)", {"src/cppkern/ops.py": py}),
        ("tests: a 3x3 column sum (#4)", {"tests/test_ops.py": TESTS + "\n\ndef test_three():\n    pass\n"}),
        ("parse: 4 key kinds (#5)", _unit("parse", rows=4)),
        ("ops: score() docstring (#6)", {"src/cppkern/ops.py": py.replace("A score of", "The score of")}),
        ("tests: score (#7)", {"tests/test_score.py": "def test_score():\n    pass\n"}),
        ("tables: semicolons too (#8)", _unit("tables", separator=";")),
        ("ops: __all__ (#9)", {"src/cppkern/__init__.py": '"""cppkern: kernels in C++."""\n__all__ = ["ops"]\n'}),
        ("reduce: sum one column at a time, clearer (#10)", {"csrc/reduce.cpp": reduce_source(COLUMN_LOOPS)}),
        ("tests: bigger matrices (#11)", {"tests/test_big.py": "def test_big():\n    pass\n"}),
        ("ops: version (#12)", {"src/cppkern/__init__.py": '"""cppkern."""\n__all__ = ["ops"]\n__version__ = "0.2"\n'}),
        ("format: backslashes (#13)", _unit("format", separator="\\\\")),
        ("docs: changelog (#14)", {"CHANGELOG.md": "0.2: faster parsing\n"}),
        ("tests: tidy (#15)", {"tests/test_big.py": "def test_big():\n    assert True\n"}),
        ("parse: 5 key kinds (#16)", _unit("parse", rows=5)),
        ("docs: README example (#17)", {"README.md": initial["README.md"] + "\n>>> ops.score('a=1')\n"}),
        ("ops: type hints (#18)", {"src/cppkern/ops.py": py.replace("def score(text)", "def score(text: str)")}),
        ("tables: 2 key kinds (#19)", _unit("tables", rows=2)),
        ("tests: score again (#20)", {"tests/test_score.py": "def test_score():\n    assert True\n"}),
    ]


def ground_truth(shas: list[str], subjects: list[str]) -> dict:
    return {"repository": "cppkern", "shas": shas, "subjects": subjects,
            "events": [{"index": PLANTED, "kind": "perf", "event": subjects[PLANTED],
                        "cases": [c["target"] for c in COMPILED_CASES]}]}


def write_compiled_repo(path: Path) -> Path:
    """Create the compiled demo repository at `path` (absent or empty); return it."""
    repo = Path(path)
    repo.mkdir(parents=True, exist_ok=True)
    if any(repo.iterdir()):
        raise FileExistsError(f"{repo} is not empty")
    git(repo, "init", "-q")
    history = _history()
    shas: list[str] = []
    subjects = [subject for subject, _ in history]
    for index, (subject, files) in enumerate(history):
        _write_files(repo, files)
        if index == len(history) - 1:  # the last sha is not known before committing: "HEAD" stands in
            (repo / "GROUND_TRUTH.json").write_text(json.dumps(ground_truth(shas + ["HEAD"], subjects), indent=1) + "\n")
        shas.append(commit_all(repo, subject, "Ada Kernel", "ada@cppkern.dev", EPOCH + 5 * 3600 * index))
    return repo
