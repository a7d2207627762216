from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Discriminator, Field, Tag, model_validator

from perfbisect.service.bounds import ShapeKey, ShapeValue, text

# A shape: 'M=512,N=512,K=512,dtype=fp32' or the same as an object; sizes fit the case columns.
ShapeText = text(500, min_length=1)
ShapeDict = Annotated[dict[ShapeKey, ShapeValue], Field(min_length=1, max_length=32)]
# Tagged by the JSON type, so an error names the one form that was meant ("shapes.0.object.N").
Shape = Annotated[Annotated[ShapeText, Tag("text")] | Annotated[ShapeDict, Tag("object")],
                  Discriminator(lambda value: "text" if isinstance(value, str) else "object")]
Shapes = Annotated[list[Shape], Field(min_length=1, max_length=256)]
TARGET_PATTERN = r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*"


def _target(value: str) -> str:
    if not re.fullmatch(TARGET_PATTERN, value):
        raise ValueError(f"target must look like module.path:function, not {value[:80]!r}")
    return value


Target = Annotated[text(300, min_length=1), AfterValidator(_target)]
SetName = text(100, min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# A suite file sent with the request: stored once by its sha256, shipped to the workers in the
# database, applied unchanged to every revision.
MAX_SUITE_SOURCE_BYTES = 256 * 1024
SOURCE_LABEL = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"


class Benchmark(BaseModel):
    """One suite and target, with the shapes that matter."""

    suite: text(200, min_length=1) | None = Field(
        default=None, examples=["gemm"],
        description="gemm, attention, rmsnorm or file:path/in/repo.py; with suite_source, a label for it (its file name)")
    suite_source: str | None = Field(
        default=None, description=f"the text of a suite file kept outside the repository (at most "
        f"{MAX_SUITE_SOURCE_BYTES} bytes of UTF-8), applied to every revision")
    target: Target = Field(examples=["minikern.gemm:matmul"])
    shapes: Shapes = Field(examples=[["M=512,N=512,K=512,dtype=fp32"]])

    @model_validator(mode="after")
    def _suite_or_source(self) -> Benchmark:
        if self.suite_source is None:
            if self.suite is None:
                raise ValueError("give a suite (gemm, attention, rmsnorm, file:path/in/repo.py) or a suite_source")
            return self
        try:
            size = len(self.suite_source.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("suite_source is not valid Unicode (lone surrogate)") from None
        if size > MAX_SUITE_SOURCE_BYTES:
            raise ValueError(f"suite_source is {size} bytes, over the limit of {MAX_SUITE_SOURCE_BYTES}")
        if "\x00" in self.suite_source:
            raise ValueError("suite_source holds a NUL byte: send the text of a Python file")
        label = self.suite or "suite.py"
        if not re.fullmatch(SOURCE_LABEL, label):
            raise ValueError(f"with suite_source, suite is a file name label (letters, digits, '_', '.', '-'), not {label!r}")
        self.suite = label
        return self


class BenchmarkSetCreate(BaseModel):
    """A named benchmark set of a repository: suites (built in, in the repository, or sent as
    suite_source) with their targets and shape presets, for the jobs that name it."""

    name: SetName = Field(examples=["attention-long"])
    benchmarks: list[Benchmark] = Field(min_length=1, max_length=32)


class SuiteSourceRead(BaseModel):
    suite: str = Field(description="the suite name its cases carry: source:<label>@<sha256 prefix>")
    sha256: str
    bytes: int


class BenchmarkSetRead(BaseModel):
    name: str
    repository: str
    cases: list[dict[str, Any]] = Field(description="the resolved cases: suite, target, params, name")
    sources: list[SuiteSourceRead] = []
